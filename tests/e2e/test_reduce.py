"""Acceptance of the Spark reduce with live key migration (docs/reduce.md), on the local stack.

One run with routers and the reduce job as real processes: 300,000 Zipf(1.0) events, three routing
updates moving 26 keys (the hottest twice) while the stream runs. The job's results must equal an
independent single-process computation over the same events (tests/support/reduce_reference.py),
exactly, per key and window; then a second job with a non-mergeable processor replays the same
routed topic and must equal its own reference. Re-writing every state chunk into the routed topic
must change nothing (each chunk is applied once).
"""

from __future__ import annotations

import threading
from collections import defaultdict
from typing import Any

import pytest

from ballast.kafka.reading import read_topic
from ballast.routing.murmur2 import kafka_partition
from ballast.workload import key_name
from tests.support import reduce_reference
from tests.support.reduce_kit import WORKERS, ReduceKit, other_worker, reduce_events

EVENTS = 300_000
RATE = 4_000  # events/s: what the job keeps up with on 2 shared cores (so chunks arrive in a batch)
AGG = "aggregate:size=4s,slide=2s"
LAST = "last_values:n=5,size=2s"
MOVES = ([0, *range(1, 10)], list(range(10, 22)), [0, *range(22, 26)])  # key ranks per update


JOB_ARGS = ("--watermark-delay", "10 seconds", "--max-offsets-per-trigger", "40000")


def live_run(
    kit: ReduceKit,
    events: list[dict[str, Any]],
    job: str,
    processor: str,
    during=None,
    master: str = "",
) -> dict[str, Any]:
    """Routers and ``job`` running while the events arrive, with the three updates at 1/4, 1/2, 3/4.
    ``during(kit, step, epoch)`` runs in a thread after each update, beside the input (e.g. to kill
    something once the migration is under way). With ``master`` the job goes to that Spark cluster."""
    threads: list[threading.Thread] = []
    kit.start_router("r1")
    kit.start_router("r2")
    if master:
        kit.submit_job(job, processor, master, *JOB_ARGS)
    else:
        kit.start_job(job, processor, *JOB_ARGS)
    quarter = len(events) // 4
    updates: list[tuple[int, dict[str, int]]] = []
    kit.produce(events[:quarter], RATE)
    for step, ranks in enumerate(MOVES, start=1):
        pins = {}
        for r in ranks:
            key = key_name(r)
            current = kit.owner.get(key, kafka_partition(key.encode(), WORKERS))
            pins[key] = other_worker(key, [current])
        updates.append((kit.assign(pins), pins))
        if during is not None:
            threads.append(threading.Thread(target=during, args=(kit, step, updates[-1][0]), daemon=True))
            threads[-1].start()
        kit.produce(events[step * quarter : (step + 1) * quarter], RATE)
    for th in threads:
        th.join(600)
    kit.flush_after(len(events), events[-1]["event_time"])
    return {"updates": updates}


@pytest.fixture(scope="module")
def live(kafka_config, tmp_path_factory) -> Any:
    kit = ReduceKit(
        kafka_config, f"reduce-{tmp_path_factory.mktemp('x').name}", tmp_path_factory.mktemp("reduce")
    )
    events = reduce_events(EVENTS)
    try:
        run = live_run(kit, events, "agg", AGG)
        expected = reduce_reference.expected_aggregates(events, 4000, 2000)
        results = kit.wait_results("agg", expected, timeout=600)
        yield {"kit": kit, "events": events, "expected": expected, "results": results, **run}
    finally:
        kit.close()


def same(
    got: dict[str, Any], exp: dict[str, Any], fields=("count", "sum", "min", "max", "mean", "window_end")
) -> bool:
    return all(got[f] == exp[f] for f in fields)


def test_results_equal_the_reference_exactly(live) -> None:
    expected, results = live["expected"], live["results"]
    assert set(results) == set(expected) | {k for k in results if k[0] == "zz-flush"}
    wrong = [k for k in expected if not same(results[k], expected[k])]
    assert not wrong, f"{len(wrong)} windows differ, e.g. {wrong[:3]}"
    assert live["kit"].dead_letters() == []  # nothing late, nothing malformed


def test_every_move_happened_and_was_installed(live) -> None:
    moved = [(key, epoch) for epoch, pins in live["updates"] for key in pins]
    keys = {k for k, _ in moved}
    assert len(live["updates"]) >= 3 and len(keys) >= 20 and key_name(0) in keys
    assert sum(k == key_name(0) for k, _ in moved) == 2
    stats = live["kit"].worker_stats("agg")
    installed = {(c.key, c.epoch) for s in stats for c in s.chunks_installed}
    sent = {(c.key, c.epoch) for s in stats for c in s.chunks_sent}
    assert set(moved) <= installed and set(moved) <= sent


def test_placement_one_worker_per_state_partition(live) -> None:
    """TaskContext.partitionId() of every worker step: worker w always ran in state partition w; and
    every (key, window) came from one worker, a key's hash home unless the key was moved."""
    stats = live["kit"].worker_stats("agg")
    placed = defaultdict(set)
    for s in stats:
        placed[s.worker].add(s.spark_partition)
    assert dict(placed) == {w: {w} for w in range(WORKERS)}
    moved = {k for _, pins in live["updates"] for k in pins}
    for (key, _start), row in live["results"].items():
        if key not in moved:
            assert row["worker"] == kafka_partition(key.encode(), WORKERS), key


def test_rewritten_chunks_are_applied_once(live) -> None:
    """Every state chunk written again into the routed topic (what a replayed micro-batch does)."""
    kit: ReduceKit = live["kit"]
    from ballast.avro.codec import AvroCodec
    from ballast.kafka.clients import make_producer

    envelope = AvroCodec("io.ballast.RoutedEnvelope")
    routed = kit.layout.name("routed")
    chunks = [
        m
        for m in read_topic(kit.kafka, routed, idle=2.0, timeout=120)
        if envelope.decode(m.value())["body"][0] == "io.ballast.StateChunk"
    ]
    assert chunks
    before = sum(s.duplicate_chunks for s in kit.worker_stats("agg"))
    producer = make_producer(kit.kafka)
    for m in chunks:
        producer.produce(routed, m.value(), m.key(), partition=m.partition())
    producer.flush(60)

    def all_seen() -> bool:
        return sum(s.duplicate_chunks for s in kit.worker_stats("agg")) - before >= len(chunks)

    from ballast.waiting import wait_until

    wait_until(all_seen, 120, "duplicated chunks read", 3.0)
    results = kit.results("agg")
    assert all(same(results[k], v) for k, v in live["expected"].items())


def test_non_mergeable_processor_equals_its_reference(live) -> None:
    """last_values (order-dependent) on the same routed topic, a second job replaying it in batches."""
    kit: ReduceKit = live["kit"]
    kit.start_job("last", LAST, "--watermark-delay", "10 seconds", "--max-offsets-per-trigger", "60000")
    expected = reduce_reference.expected_last_values(live["events"], 5, 2000)
    results = kit.wait_results("last", expected, timeout=600)
    wrong = [
        k
        for k in expected
        if not (same(results[k], expected[k]) and tuple(results[k]["values"]) == expected[k]["values"])
    ]
    assert not wrong, f"{len(wrong)} windows differ, e.g. {wrong[:3]}"
    installed = {(c.key, c.epoch) for s in kit.worker_stats("last") for c in s.chunks_installed}
    assert {(k, e) for e, pins in live["updates"] for k in pins} <= installed
