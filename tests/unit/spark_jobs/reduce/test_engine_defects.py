"""The defects a review found in the reduce engine, one test each (docs/reduce.md, "What a review
found"). Each of these failed against the engine before the rewrite (the per-key engine with hash
bins); the same scenarios run here against the batch engine."""

from __future__ import annotations

from ballast.control.state import make_event
from ballast.routing.murmur2 import kafka_partition
from spark_jobs.processors.aggregate import WindowAggregate
from spark_jobs.processors.last_values import LastValues
from spark_jobs.processors.windows import WindowSpec
from tests.support.engine_rows import N, Worker, chunk_row, data, emitted, marker, view_with

AGG = WindowAggregate(WindowSpec(100))


def key_homed_at(worker: int, n: int = N) -> str:
    return next(f"k{i}" for i in range(1000) if kafka_partition(f"k{i}".encode(), n) == worker)


K = key_homed_at(0)


def test_1_a_key_with_no_open_window_leaves_the_store() -> None:
    w = Worker(0, view_with(), AGG, horizon_ms=0)
    w.step([marker(0, 0)])
    keys = [f"u{i}" for i in range(20000) if kafka_partition(f"u{i}".encode(), N) == 0][:1500]
    for step in range(15):
        batch = [data(k, 1.0, step * 100 + 5, 0) for k in keys[step * 100 : (step + 1) * 100]]
        res = w.step(batch, watermark=step * 100)
    # only the last window's 100 keys are open; everything else was emitted and dropped
    assert res.stats["state_keys"] <= 200, res.stats["state_keys"]
    assert len(w.store.buckets) <= 2


def test_2_a_lagging_old_owner_never_writes_a_moved_window_with_a_wrong_value() -> None:
    """W0's partition lags: it has not seen epoch 1, which moves K to W1, where a router that is
    ahead already put K's record of window 0. W0 must not emit window 0 from its part: the control
    log (not its partition) says K's run here has ended."""
    view = view_with({K: 1})
    w0, w1 = Worker(0, view, AGG), Worker(1, view, AGG)
    w0.step([marker(0, 0), data(K, 1.0, 10, 0)])
    w1.step([marker(0, 1), marker(1, 1, "in:1"), data(K, 4.0, 20, 1)])
    first = w0.step([], watermark=500)
    shipped = w0.step([marker(1, 0)], watermark=500)
    w1.step([marker(1, 1, "in:0")])
    second = w1.step([chunk_row(c) for c in shipped.chunks], watermark=500)
    assert emitted(first) + emitted(second) == [(K, 0, 2, 5.0)]


def test_2b_the_answer_is_the_logs_end_as_the_batch_read_it() -> None:
    """The same lag, but the batch W0 runs did not read epoch 1 in the log (it was planned before
    the update was appended): W0 emits from what it holds, as Spark would on this batch's first
    run and on every replay of it. The rule asks the log as the batch read it, so a replay cannot
    answer otherwise than the first run."""
    view = view_with({K: 1})
    w0 = Worker(0, view, AGG)
    w0.step([marker(0, 0), data(K, 1.0, 10, 0)], log=False)
    assert emitted(w0.step([], watermark=500, log=False)) == [(K, 0, 1, 1.0)]
    w0b = Worker(0, view, AGG)
    w0b.step([marker(0, 0), data(K, 1.0, 10, 0)])
    assert emitted(w0b.step([], watermark=500)) == []


def test_3_a_window_counts_the_late_records_it_left_out() -> None:
    w = Worker(0, view_with(), AGG)
    w.step([marker(0, 0), data(K, 1.0, 10, 0)])
    out = w.step([data(K, 2.0, 20, 0)], watermark=150)  # 20 < 150: late; window 0 emitted now
    assert [d.reason for d in out.dead] == ["late"]
    r = out.results
    assert (r.count.tolist(), r.excluded.tolist(), r.revision.tolist()) == ([1], [1], [0])
    # a late record after the window was emitted: a correction (same window, next revision)
    again = w.step([data(K, 3.0, 30, 0)], watermark=160)
    r = again.results
    assert (r.count.tolist(), r.sum.tolist(), r.excluded.tolist(), r.revision.tolist()) == (
        [1],
        [1.0],
        [2],
        [1],
    )


def test_4_a_legacy_routers_far_future_record_is_refused() -> None:
    """This version's routers refuse such records before routing (services/router, ``future``);
    a record of an older router, whose markers carry no progress, is judged here against the time
    it was routed, and moves its partition's progress no further than that allows."""
    now = 1_767_225_600_000
    w = Worker(0, view_with(), AGG, max_future_ms=10_000, watermark_delay_ms=0)

    def old(value: float, t: int, partition: int) -> dict:
        return {**data(K, value, t, 0), "legacy": True, "timestamp": now, "source_partition": partition}

    out = w.step([marker(0, 0), old(1.0, now + 3_600_000, 0), old(2.0, now - 5, 0)], watermark=None, now=now)
    assert [d.reason for d in out.dead] == ["future"] and out.stats["refused_records"] == 1
    assert out.stats["state_keys"] == 1
    assert out.stats["watermark_ms"] == 0  # partition 1 has shown nothing yet: it holds


def test_5a_a_record_of_a_shipped_run_is_dead_lettered_and_the_worker_goes_on() -> None:
    view = view_with({K: 1})
    w0 = Worker(0, view, AGG)
    w0.step([marker(0, 0), data(K, 1.0, 10, 0), marker(1, 0)])  # shipped
    out = w0.step([data(K, 2.0, 20, 0)])  # an unfenced (at-least-once zombie) router's record
    assert [d.reason for d in out.dead] == ["frontier-violation"] and out.stats["violations"] == 1


def test_5b_a_chunk_cut_differently_after_a_restart_is_still_installed_once() -> None:
    lv = LastValues(2, WindowSpec(100))
    view = view_with({K: 1})
    w0 = Worker(0, view, lv, chunk_bytes=1024)
    w0.step([marker(0, 0), *[data(K, float(i), 50 * i, 0) for i in range(2000)]])
    small = w0.step([marker(1, 0)]).chunks
    w0b = Worker(0, view, lv, chunk_bytes=2048)  # the same state, after a restart with a bigger --chunk-bytes
    w0b.step([marker(0, 0), *[data(K, float(i), 50 * i, 0) for i in range(2000)]])
    big = w0b.step([marker(1, 0)]).chunks
    assert len(small) > len(big) > 2
    w1 = Worker(1, view, lv)
    w1.step([marker(0, 1), marker(1, 1)])
    out = w1.step([chunk_row(small[0]), *[chunk_row(c) for c in big], *[chunk_row(c) for c in small[1:]]])
    assert len(out.stats["chunks_installed"]) == 1 and out.dead == []
    assert out.stats["duplicate_chunks"] == len(small) - 1  # the rest of the first cut, once installed


def test_5c_a_new_input_partition_holds_the_frontier() -> None:
    view = view_with({K: 1})
    w0 = Worker(0, view, AGG)
    w0.step([marker(0, 0), data(K, 1.0, 10, 0), marker(0, 0, "in:2")])  # in:2 added, its router at epoch 0
    out = w0.step([marker(1, 0, "in:0", "in:1")])
    assert out.chunks == [], "shipped while the new partition in:2 still routes under epoch 0"
    out = w0.step([marker(1, 0, "in:2")])
    assert [c.key for c in out.chunks] == [K]


def test_5d_scale_is_followed() -> None:
    view = view_with()
    view.apply(make_event(1, "SCALE", {"num_workers": 3, "reason": ""}))
    assert view.rehash_at(1) == (4, 3) and view.modulus(1) == 3


def test_6_holding_appends_instead_of_rewriting_what_is_held() -> None:
    lv = LastValues(3, WindowSpec(10**9))
    view = view_with({K: 1})
    w1 = Worker(1, view, lv)
    w1.step([marker(0, 1), marker(1, 1)])
    per_batch = []
    for b in range(30):
        before = w1.store.written
        w1.step([data(K, float(i), b * 100 + i, 1) for i in range(50)])
        per_batch.append(w1.store.written - before)
    assert per_batch[-1] < 3 * per_batch[0], per_batch
    assert w1.store.reads_held == 0  # holding never reads back what is held


def test_7_one_misrouted_row_dead_letters_that_row_only() -> None:
    view = view_with({K: 1})
    w0 = Worker(0, view, AGG)
    out = w0.step([marker(0, 0), marker(1, 0, "in:0"), data(K, 1.0, 10, 0), data(K, 2.0, 20, 1)])
    assert [d.reason for d in out.dead] == ["misrouted"]
