"""Acceptance of the Spark reduce with live key migration (docs/reduce.md), on the local stack.

One run with routers and the reduce job as real processes: 300,000 Zipf(1.0) events; while they
stream, three routing updates move 26 keys (the hottest twice) and the hashed workers are scaled
from 8 to 6 and back to 8 (``SCALE``: every key whose hash home changes moves, state and all).
Every row the job wrote is judged, not the latest per key (tests/support/output_judge.py): each
window's rows must be replays of one value or a correction sequence, ending in an independent
single-process computation over the same events (tests/support/reduce_reference.py). Then two
more jobs replay the same routed topic: a non-mergeable processor, and a processor of the user's
own (docs/examples/top_values.py, imported from a folder outside the project), each against its
own reference. Re-writing every state chunk into the routed topic must change nothing.
"""

from __future__ import annotations

import shutil
import threading
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from ballast.kafka.reading import read_topic
from ballast.paths import PROJECT_ROOT
from ballast.routing.murmur2 import kafka_partition
from ballast.workload import FLUSH_KEY, key_name
from tests.support import reduce_reference
from tests.support.output_judge import assert_rows_right, judge
from tests.support.reduce_kit import FLUSH_MS, WORKERS, ReduceKit, reduce_events

EVENTS = 300_000
RATE = 4_000  # events/s: what the job keeps up with on 2 shared cores (so chunks arrive in a batch)
AGG = "aggregate:size=4s,slide=2s"
LAST = "last_values:n=5,size=2s"
USER = "acme_processors.top_values:TopValues:n=3,size=2s"
MOVES = ([0, *range(1, 10)], list(range(10, 22)), [0, *range(22, 26)])  # key ranks per update
SCALED = 6  # hashed workers between the two SCALE events

JOB_ARGS = ("--watermark-delay", "10 seconds", "--max-offsets-per-trigger", "40000")


def pins_for(kit: ReduceKit, ranks: list[int], limit: int) -> dict[str, int]:
    """Each ranked key to the next worker below ``limit`` that is not its current one."""
    pins = {}
    for r in ranks:
        key = key_name(r)
        current = kit.current_owner(key)
        pins[key] = next(w for w in ((current + s) % limit for s in range(1, limit + 1)) if w != current)
    return pins


def live_run(
    kit: ReduceKit,
    events: list[dict[str, Any]],
    job: str,
    processor: str,
    during=None,
    master: str = "",
) -> dict[str, Any]:
    """Routers and ``job`` running while the events arrive in eighths: routing updates after 2/8,
    4/8 and 6/8, ``SCALE`` to 6 hashed workers after 3/8 and back to 8 after 5/8 (updates made
    while 6 workers hash pin to workers below 6). ``during(kit, step, epoch)`` runs in a thread
    after each routing update, beside the input (e.g. to kill something once the migration is
    under way). With ``master`` the job goes to that Spark cluster."""
    threads: list[threading.Thread] = []
    kit.start_router("r1")
    kit.start_router("r2")
    if master:
        kit.submit_job(job, processor, master, *JOB_ARGS)
    else:
        kit.start_job(job, processor, *JOB_ARGS)
    eighth = len(events) // 8
    updates: list[tuple[int, dict[str, int]]] = []
    scales: list[tuple[int, int]] = []
    for part in range(8):
        if part in (2, 4, 6):
            step = part // 2
            limit = SCALED if step < 3 else WORKERS
            pins = pins_for(kit, MOVES[step - 1], limit)
            updates.append((kit.assign(pins), pins))
            if during is not None:
                threads.append(threading.Thread(target=during, args=(kit, step, updates[-1][0]), daemon=True))
                threads[-1].start()
        elif part in (3, 5):
            workers = SCALED if part == 3 else WORKERS
            scales.append((kit.scale(workers), workers))
        end = len(events) if part == 7 else (part + 1) * eighth
        kit.produce(events[part * eighth : end], RATE)
    for th in threads:
        th.join(600)
    kit.flush_after(len(events), events[-1]["event_time"])
    return {"updates": updates, "scales": scales}


def user_processor_site(folder: Path) -> Path:
    """docs/examples/top_values.py as ``acme_processors.top_values`` in ``folder`` (outside the
    project: the job finds it through PYTHONPATH only)."""
    package = folder / "acme_processors"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    shutil.copy(PROJECT_ROOT / "docs" / "examples" / "top_values.py", package / "top_values.py")
    return folder


def expected_top_values(events: list[dict[str, Any]], n: int, size_ms: int) -> dict[tuple[str, int], Any]:
    """Per (key, tumbling window): count, sum and the n largest values, largest first (plain loops)."""
    values: dict[tuple[str, int], list[float]] = defaultdict(list)
    for e in events:
        t = int(e["event_time"])
        values[(str(e["key"]), t - t % size_ms)].append(float(e["value"]))
    return {w: (len(v), sum(v), tuple(sorted(v, reverse=True)[:n])) for w, v in values.items()}


@pytest.fixture(scope="module")
def live(kafka_config, tmp_path_factory) -> Any:
    kit = ReduceKit(
        kafka_config, f"reduce-{tmp_path_factory.mktemp('x').name}", tmp_path_factory.mktemp("reduce")
    )
    events = reduce_events(EVENTS)
    try:
        run = live_run(kit, events, "agg", AGG)
        expected = reduce_reference.expected_aggregates(events, 4000, 2000)
        kit.wait_results("agg", expected, timeout=600)
        yield {"kit": kit, "events": events, "expected": expected, **run}
    finally:
        kit.close()


def test_every_row_is_exact_or_a_correction_ending_exact(live) -> None:
    """Against the reference over the records the job counted; a record it left out is late (a
    router that fell behind by more than the delay on a loaded machine), dead-lettered, and
    counted in its windows' rows. Nothing else is dead-lettered."""
    kit: ReduceKit = live["kit"]
    late = kit.left_out("agg")
    counted = reduce_reference.expected_aggregates(
        [e for i, e in enumerate(live["events"]) if i not in late], 4000, 2000
    )
    assert_rows_right(judge(kit.rows("agg"), counted, live["expected"], ignore_keys=[FLUSH_KEY]))


def test_every_move_and_rehash_happened_and_was_installed(live) -> None:
    kit: ReduceKit = live["kit"]
    moved = [(key, epoch) for epoch, pins in live["updates"] for key in pins]
    keys = {k for k, _ in moved}
    assert len(live["updates"]) >= 3 and len(keys) >= 20 and key_name(0) in keys
    assert sum(k == key_name(0) for k, _ in moved) == 2
    stats = kit.worker_stats("agg")
    installed = {(c.key, c.epoch) for s in stats for c in s.chunks_installed}
    sent = {(c.key, c.epoch) for s in stats for c in s.chunks_sent}
    assert set(moved) <= installed and set(moved) <= sent
    # SCALE: keys whose hash home changed between 8 and 6 workers travelled at both rehash epochs
    (down, _), (up, _) = live["scales"]
    for epoch in (down, up):
        rehashed = {k for k, e in installed if e == epoch}
        assert len(rehashed) > 100, (epoch, len(rehashed))
        for key in list(rehashed)[:50]:
            assert (
                kafka_partition(key.encode(), WORKERS) != kafka_partition(key.encode(), SCALED) or key in keys
            )


def test_placement_one_worker_per_state_partition(live) -> None:
    """TaskContext.partitionId() of every worker step: worker w always ran in state partition w; and
    a key that neither a pin nor the SCALE moved was always reduced at its hash home."""
    kit: ReduceKit = live["kit"]
    placed = defaultdict(set)
    for s in kit.worker_stats("agg"):
        placed[s.worker].add(s.spark_partition)
    assert dict(placed) == {w: {w} for w in range(WORKERS)}
    moved = {k for _, pins in live["updates"] for k in pins}
    for row in kit.rows("agg"):
        key = row["key"]
        home = kafka_partition(key.encode(), WORKERS)
        if key not in moved and key != FLUSH_KEY and home == kafka_partition(key.encode(), SCALED):
            assert row["worker"] == home, key


def test_rewritten_chunks_are_applied_once(live) -> None:
    """Every state chunk written again into the routed topic (what a replayed micro-batch does)."""
    kit: ReduceKit = live["kit"]
    from ballast.avro.codec import AvroCodec
    from ballast.kafka.clients import make_producer
    from ballast.waiting import wait_until

    envelope = AvroCodec("io.ballast.RoutedEnvelope")
    routed = kit.layout.name("routed")
    chunks = [
        m
        for m in read_topic(kit.kafka, routed, idle=2.0, timeout=120)
        if envelope.decode(m.value())["body"][0] == "io.ballast.StateChunk"
    ]
    assert chunks
    before = sum(s.duplicate_chunks for s in kit.worker_stats("agg"))
    rows_before = len(kit.rows("agg"))
    producer = make_producer(kit.kafka)
    for m in chunks:
        producer.produce(routed, m.value(), m.key(), partition=m.partition())
    producer.flush(60)

    def all_seen() -> bool:
        return sum(s.duplicate_chunks for s in kit.worker_stats("agg")) - before >= len(chunks)

    wait_until(all_seen, 180, "duplicated chunks read", 3.0)
    assert len(kit.rows("agg")) == rows_before  # nothing written again


def test_replays_by_a_non_mergeable_and_a_users_processor_equal_their_references(live, tmp_path) -> None:
    """last_values (order-dependent) and the user's top_values (per-key path, imported from
    outside the project) on the same routed topic, two more jobs replaying it as a backlog.

    A backlog read 60,000 records a trigger is cut by Spark in proportion to each partition's
    backlog, and the partitions do not hold event time evenly (the SCALE to 6 left two of them
    nearly empty for a while): the watermark runs ahead of some partitions' unread records, which
    then arrive late. They must be dead-lettered with the job's name, counted in their windows'
    rows (the built-in; a per-key processor's windows are its own, so its late records are counted
    in the worker's stats), and every row must equal the reference over the records counted."""
    kit: ReduceKit = live["kit"]
    site = user_processor_site(tmp_path / "site")
    replay = (
        "--watermark-delay", "10 seconds", "--correction-horizon", "2 minutes",
        "--max-offsets-per-trigger", "60000",
    )  # fmt: skip
    kit.start_job("last", LAST, *replay)
    kit.start_job("user", USER, *replay, env={"PYTHONPATH": str(site)})
    events = live["events"]
    every_last = reduce_reference.expected_last_values(events, 5, 2000)
    kit.wait_results("last", every_last, timeout=900)
    # windows all of whose records came late have no row of the per-key processor: wait for the
    # watermark the flush event brings instead (every window closes under it)
    kit.wait_watermark("user", events[-1]["event_time"] + FLUSH_MS - 10_000, timeout=900)
    # the live job's letters are judged by the first test (on a loaded machine it has some too)
    letters = [d for d in kit.dead_lettered() if d.job in ("last", "user")]
    assert {d.reason for d in letters} <= {"late"}, {d.reason for d in letters}
    for job in ("last", "user"):
        late = {d.event for d in letters if d.job == job}
        assert None not in late
        kept = [e for i, e in enumerate(events) if i not in late]
        if job == "last":
            counted = reduce_reference.expected_last_values(kept, 5, 2000)
            rows = kit.rows("last")
            assert_rows_right(judge(rows, counted, every_last, ignore_keys=[FLUSH_KEY]))
            final = {(r["key"], r["window_start"]): r for r in rows}
            wrong = [w for w, exp in counted.items() if tuple(final[w]["values"]) != exp["values"]]
            assert not wrong, f"{len(wrong)} windows' last values differ, e.g. {wrong[:3]}"
        else:
            expected_user = expected_top_values(kept, 3, 2000)
            got = [
                ((r["key"], r["window_start"]), (r["count"], r["sum"], tuple(r["values"])))
                for r in kit.rows("user")
                if r["key"] != FLUSH_KEY
            ]
            wrong = [(w, v, expected_user.get(w)) for w, v in got if expected_user.get(w) != v]
            assert not wrong, f"{len(wrong)} rows of the user's processor differ, e.g. {wrong[:3]}"
            assert {w for w, _ in got} == set(expected_user)
            stats = kit.worker_stats("user")
            assert sum(s.late_records for s in stats) >= len(late)  # counted where it can be
        installed = {(c.key, c.epoch) for s in kit.worker_stats(job) for c in s.chunks_installed}
        assert {(k, e) for e, pins in live["updates"] for k in pins} <= installed, job
