"""The frontier rule on a real broker: routers come, go, lose partitions and restart while the
routing table changes every 200 ms, and the routed topic keeps its promise to the workers.

Every test judges the routed topic with ``kit.verify``: each record exactly once, in the partition
its epoch's table (folded by the test from the events it sent) names, and the frontier checker of
tests/support/frontier.py (schema file only: every record's epoch equals the latest marker
covering its input partition in its routed partition).
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from confluent_kafka import Consumer, TopicPartition
from conftest import WORKERS

from ballast.waiting import wait_until
from ballast.workload import input_events

FAST_GROUP = {"static_membership": False, "session_timeout_ms": 6000}


@contextmanager
def epochs_every(kit, seconds: float, keys: list[str]) -> Iterator[list[int]]:
    """Move a few keys to another worker every ``seconds`` until the block ends (a thread)."""
    stop = threading.Event()
    sent: list[int] = []
    rng = random.Random(5)

    def run() -> None:
        while not stop.wait(seconds):
            moved = {k: rng.randrange(WORKERS) for k in rng.sample(keys, 3)}
            sent.append(
                kit.send_control("ROUTING_UPDATE", {"assign": moved, "unassign": [], "reason": "t"})["epoch"]
            )

    th = threading.Thread(target=run, name="epochs", daemon=True)
    th.start()
    try:
        yield sent
    finally:
        stop.set()
        th.join(30)


def feed(kit, events: list[dict], chunk: int, pause: float) -> threading.Thread:
    def run() -> None:
        for i in range(0, len(events), chunk):
            kit.produce_events(events[i : i + chunk])
            time.sleep(pause)

    th = threading.Thread(target=run, name="feed", daemon=True)
    th.start()
    return th


def hot_keys(events: list[dict], n: int = 40) -> list[str]:
    seen: dict[str, int] = {}
    for e in events:
        seen[e["key"]] = seen.get(e["key"], 0) + 1
    return sorted(seen, key=seen.__getitem__, reverse=True)[:n]


def test_two_routers_with_rebalances_while_epochs_change_every_200ms(kit):
    n = 60_000
    events = list(input_events(n, num_keys=5_000, z=1.0, seed=3))
    with epochs_every(kit, 0.2, hot_keys(events)) as sent:
        feeder = feed(kit, events, 2_000, 0.25)
        a = kit.start_thread("fa", **FAST_GROUP)
        wait_until(lambda: a.totals.offered >= 10_000, 120, "fa routing 10,000 records", interval=0.05)
        b = kit.start_thread("fb", **FAST_GROUP)  # a rebalance
        wait_until(lambda: b.totals.offered > 0, 120, "fb getting partitions", interval=0.05)
        a.stop()  # another: fb takes everything
        wait_until(lambda: b.totals.offered >= n // 2, 180, "fb routing half the input", interval=0.05)
        feeder.join(180)
        kit.wait_committed(n)
    kit.stop_all()
    assert len(sent) >= 10, f"only {len(sent)} epochs while routing"
    assert a.totals.offered > 0 and b.totals.offered > 0
    kit.verify(kit.read_routed(n), events, {"fa", "fb"})


def test_partitions_lost_right_after_an_epoch_change(kit):
    """The router stalls (longer than max.poll.interval.ms) with a transaction open that holds
    the new epoch's marker: the group takes its partitions (``on_lost``); the transaction aborts
    and the records come again, after a marker again."""
    n = 20_000
    events = list(input_events(n, num_keys=2_000, z=1.0, seed=4))
    kit.produce_events(events[: n // 2])
    r = kit.start_thread(
        "fl", commit_interval_ms=30_000, max_poll_interval_ms=6_000, **FAST_GROUP
    )  # commits only at epoch changes and rebalances
    wait_until(lambda: r.totals.offered > 0, 120, "fl routing", interval=0.05)
    stalled = threading.Event()
    route_batch = r._route_batch

    def slow_after_epoch_1(msgs) -> None:
        route_batch(msgs)
        if r.state.epoch >= 1 and not stalled.is_set():
            stalled.set()
            time.sleep(9)  # > max.poll.interval.ms: the partitions are lost

    r._route_batch = slow_after_epoch_1  # type: ignore[method-assign]
    kit.send_control(
        "ROUTING_UPDATE", {"assign": {k: 5 for k in hot_keys(events, 5)}, "unassign": [], "reason": "t"}
    )
    kit.produce_events(events[n // 2 :])
    wait_until(stalled.is_set, 60, "a batch under epoch 1", interval=0.05)
    kit.wait_committed(n, timeout=120)
    kit.stop_all()
    assert r.totals.aborts >= 1, "the partitions were not lost: nothing was tested"
    kit.verify(kit.read_routed(n), events, {"fl"})


def test_a_router_down_for_five_epochs_then_restarted(kit):
    n = 10_000
    events = list(input_events(n, num_keys=1_000, z=1.0, seed=6))
    keys = hot_keys(events, 20)
    kit.produce_events(events[: n // 2])
    kit.start_thread("fd")
    kit.wait_committed(n // 2)
    kit.stop_all()
    for i in range(5):
        kit.send_control(
            "ROUTING_UPDATE", {"assign": {keys[i]: (i + 1) % WORKERS}, "unassign": [], "reason": "t"}
        )
    kit.produce_events(events[n // 2 :])
    r = kit.start_thread("fd")
    kit.wait_committed(n)
    kit.stop_all()
    assert r.state.epoch == 5
    kit.verify(kit.read_routed(n), events, {"fd"})


def test_more_routers_than_input_partitions(kit):
    """Six routers, four input partitions: two own nothing and must not hold any worker back."""
    n = 20_000
    events = list(input_events(n, num_keys=2_000, z=1.0, seed=8))
    ids = [f"fm{i}" for i in range(6)]
    routers = [kit.start_thread(rid, **FAST_GROUP) for rid in ids]
    with epochs_every(kit, 0.2, hot_keys(events)):
        kit.produce_events(events)
        kit.wait_committed(n)
    kit.stop_all()
    assert sum(1 for r in routers if r.totals.offered == 0) >= 2
    kit.verify(kit.read_routed(n), events, set(ids))


def test_committed_offset_beyond_the_log_end_is_reset_not_skipped(kit):
    """The group's offset for partition 0 is 1000 but the partition holds fewer records (e.g. the
    topic was recreated): the consumer resets to the earliest offset and the router must route
    what it fetched, not drop everything below 1000 as already processed."""
    events = list(input_events(400, num_keys=50, z=1.0, seed=9))
    kit.produce_events(events)
    c = Consumer(kit.kafka.consumer(kit.group))
    try:
        c.commit(offsets=[TopicPartition(kit.input, 0, 1000)], asynchronous=False)
    finally:
        c.close()
    r = kit.start_thread("fr")
    wait_until(lambda: r.totals.offered >= len(events), 60, "every record routed", interval=0.1)
    kit.stop_all()
    assert r.totals.offset_resets == 1
    kit.verify(kit.read_routed(len(events)), events, {"fr"})


def test_a_commit_delayed_past_its_timeout_is_resumed(kit, kafka_stack):
    """The broker is stopped (SIGSTOP) for 6 s while the router commits every 200 ms with a 2 s
    commit timeout: commits time out, are resumed, and the router carries on without a restart,
    a loss or a duplicate."""
    n = 30_000
    events = list(input_events(n, num_keys=3_000, z=1.0, seed=10))
    pid = kafka_stack.nodes[0].pid
    feeder = feed(kit, events[: n // 2], 1_000, 0.1)
    r = kit.start_thread("fs", commit_timeout_ms=2_000, commit_attempts=20)
    wait_until(lambda: r.totals.transactions >= 3, 60, "a few commits", interval=0.05)
    feeder.join(60)
    os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(6)
    finally:
        os.kill(pid, signal.SIGCONT)
    kit.produce_events(events[n // 2 :])
    kit.wait_committed(n)
    kit.stop_all()
    assert r.totals.commit_retries >= 1, "no commit timed out: nothing was tested"
    kit.verify(kit.read_routed(n), events, {"fs"})
