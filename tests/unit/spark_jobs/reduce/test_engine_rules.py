"""The worker engine's rules one at a time, on hand-written rows (no Spark)."""

from __future__ import annotations

from ballast.routing.murmur2 import kafka_partition
from spark_jobs.processors.aggregate import WindowAggregate
from spark_jobs.processors.windows import WindowSpec
from spark_jobs.reduce.contract import BAD
from tests.support.engine_rows import N, Worker, chunk_row, data, emitted, marker, row, view_with

AGG = WindowAggregate(WindowSpec(100))


def key_homed_at(worker: int, n: int = N) -> str:
    return next(f"k{i}" for i in range(1000) if kafka_partition(f"k{i}".encode(), n) == worker)


K = key_homed_at(0)  # moves 0 -> 1 at epoch 1
STAY = next(f"s{i}" for i in range(1000) if kafka_partition(f"s{i}".encode(), N) == 0)


def test_state_ships_only_once_every_input_partition_passed_the_epoch() -> None:
    view = view_with({K: 1})
    w0 = Worker(0, view, AGG)
    first = w0.step([marker(0, 0), data(K, 1.0, 10, 0), marker(1, 0, "in:0")])
    assert first.chunks == [] and first.stats["frontier_epoch"] == 0
    second = w0.step([data(K, 2.0, 20, 0), marker(1, 0, "in:1")])
    assert [(c.key, c.epoch, c.to_worker) for c in second.chunks] == [(K, 1, 1)]
    assert second.stats["frontier_epoch"] == 1


def test_new_owner_merges_its_partial_state_with_the_chunk_and_emits_only_after() -> None:
    view = view_with({K: 1})
    w0, w1 = Worker(0, view, AGG), Worker(1, view, AGG)
    w0.step([marker(0, 0), data(K, 1.0, 10, 0), data(K, 2.0, 20, 0)])
    early = w1.step([marker(0, 1), marker(1, 1), data(K, 4.0, 30, 1)])
    assert early.stats["held_records"] == 1 and early.stats["pending_keys"] == 1
    assert emitted(w1.step([], watermark=500)) == []  # the window is closed, but its chunk is missing
    shipped = w0.step([marker(1, 0)])
    merged = w1.step([chunk_row(c) for c in shipped.chunks], watermark=500)
    assert emitted(merged) == [(K, 0, 3, 7.0)]
    assert merged.stats["chunks_installed"][0]["key"] == K


def test_a_worker_that_knows_its_key_leaves_holds_the_key_windows() -> None:
    """The log moves K at epoch 1: K's window closed by the watermark is not emitted at W0 (a record
    of K under epoch 1 may already sit at W1), even before W0's partition carries epoch 1; a key
    that stays is emitted."""
    view = view_with({K: 1})
    w0 = Worker(0, view, AGG)
    w0.step([marker(0, 0), data(K, 1.0, 10, 0), data(STAY, 5.0, 10, 0)])
    held = w0.step([], watermark=500)
    assert [r[0] for r in emitted(held)] == [STAY]
    shipped = w0.step([marker(1, 0)], watermark=500)
    assert emitted(shipped) == [] and [c.key for c in shipped.chunks] == [K]


def test_a_duplicated_chunk_is_applied_once() -> None:
    view = view_with({K: 1})
    w0, w1 = Worker(0, view, AGG), Worker(1, view, AGG)
    w0.step([marker(0, 0), data(K, 1.0, 10, 0)])
    chunks = w0.step([marker(1, 0)]).chunks
    w1.step([marker(0, 1), marker(1, 1)])
    both = w1.step([chunk_row(c) for c in chunks] * 2)  # written twice in one batch
    again = w1.step([chunk_row(c) for c in chunks])  # and once more later (a replayed batch)
    assert both.stats["duplicate_chunks"] == 1 and again.stats["duplicate_chunks"] == 1
    out = w1.step([], watermark=500)
    assert emitted(out) == [(K, 0, 1, 1.0)]


def test_a_chunk_arriving_after_its_key_moved_on_is_ignored_as_a_duplicate() -> None:
    view = view_with({K: 1}, {K: 2})
    w0, w1 = Worker(0, view, AGG), Worker(1, view, AGG)
    w0.step([marker(0, 0), data(K, 1.0, 10, 0)])
    chunks = w0.step([marker(1, 0)]).chunks
    w1.step([marker(0, 1), marker(1, 1), *[chunk_row(c) for c in chunks]])
    onward = w1.step([marker(2, 1)])
    assert [(c.key, c.epoch, c.to_worker) for c in onward.chunks] == [(K, 2, 2)]
    late_copy = w1.step([chunk_row(c) for c in chunks])
    assert late_copy.stats["duplicate_chunks"] == 1 and late_copy.chunks == []


def test_a_key_that_moves_again_before_its_chunk_arrived_is_shipped_when_it_does() -> None:
    view = view_with({K: 1}, {K: 2})
    w0, w1, w2 = Worker(0, view, AGG), Worker(1, view, AGG), Worker(2, view, AGG)
    w0.step([marker(0, 0), data(K, 1.0, 10, 0)])
    w1.step([marker(0, 1), marker(1, 1), data(K, 2.0, 20, 1), marker(2, 1)])  # frontier 2, no chunk yet
    to_w1 = w0.step([marker(1, 0)]).chunks
    onward = w1.step([chunk_row(c) for c in to_w1])
    assert [(c.key, c.epoch, c.to_worker) for c in onward.chunks] == [(K, 2, 2)]
    w2.step([marker(0, 2), marker(1, 2), marker(2, 2), data(K, 4.0, 30, 2)], watermark=0)
    final = w2.step([chunk_row(c) for c in onward.chunks], watermark=500)
    assert emitted(final) == [(K, 0, 3, 7.0)]


def test_late_bad_misrouted_and_foreign_rows() -> None:
    view = view_with({K: 1})
    w0, w1 = Worker(0, view, AGG), Worker(1, view, AGG)
    out = w0.step(
        [
            marker(0, 0),
            data(STAY, 1.0, 5, 0),
            row(kind=BAD, raw=b"junk", error="Avro decoding failed"),
            data(K, 1.0, 700, 1),
        ],
        watermark=100,
    )
    assert sorted(d.reason for d in out.dead) == ["late", "malformed", "misrouted"]
    w0.step([data(K, 3.0, 150, 0)], watermark=100)
    chunks = w0.step([marker(1, 0)]).chunks
    foreign = w1.step([marker(0, 1), marker(1, 1), *[chunk_row(c, job="other-job") for c in chunks]])
    assert foreign.stats["chunks_installed"] == [] and foreign.dead == []
    misdirected = Worker(2, view, AGG).step([chunk_row(c) for c in chunks])
    assert [d.reason for d in misdirected.dead] == ["misdirected-chunk"]
