"""Start-up on a control log of 1,000,000 events (issue 27, defect 5), on a real broker.

The log is what a long-running deployment writes: paced migrations (START, the ROUTING_UPDATE that
moves 16 keys, STATE_SENT, DONE) over 2,000 keys, a shedding change every ~100 epochs, and a
snapshot every 1,000 epochs as the controller writes it (with the history). It is produced with a
plain fast producer, not through the controller (encoded and produced in a process of its own while
the test generates the events and folds its truth: tests/support/control_logs.py).

Asserted: the *work* each reader does to start (records read, events folded) and the memory the
reduce's fold holds (tracemalloc), both bounded by the live state and not by the log's length, and
every answer checked against the test's own fold of the routing (which keys each update moved,
read off the events): the routing table, the run of keys pinned long ago and of keys never moved,
owners at old epochs, and the lowest keep-probability since the genesis. No timed assertion; the
reduce's own 60 s deadline is the product's (the old fold from the genesis ran into it). The
figures measured are in docs/reduce.md ("The control log in a worker").
"""

from __future__ import annotations

import gc
import tracemalloc
import uuid
from typing import Any

import pytest

from ballast.control.log import SCAN_CHUNK, SNAPSHOT_EVERY, ControlLogReader
from ballast.control.state import initial_state, keep_for
from ballast.deployment.create import create_deployment
from ballast.kafka.topics import TopicLayout
from ballast.routing.murmur2 import kafka_partition
from spark_jobs.reduce.ownership_log import OwnershipLog
from tests.support.control_logs import TOPIC, LogShape, control_log, key_name, produce_log

SHAPE = LogShape()  # 1,000,000 epochs, 8 workers, 2,000 keys, a snapshot every 1,000
W = SHAPE.workers
NEVER_MOVED = "never-moved-key"  # in no routing update
# the fold's memory on a fresh start: what it holds is the live state (a 2,000-key table and the
# history of 2,000 keys), so the bound is a few MB; folding the whole log held ~860 B per event,
# 860 MB here
MEMORY_BOUND = 48 * 1024 * 1024
# the second probe into the past: far enough back that the snapshot before it is a fresh search
# (the 5,000-back one's load does not reach it), near enough that it reads 230,000 records; from
# the middle of the log the test took 229 s in CI, 54 s so
LONG_AGO = 100_000


class Expected:
    """The test's own fold of the routing: per key its pin and the epochs its owner changed."""

    def __init__(self) -> None:
        self.pins: dict[str, int] = {}
        self.changes: dict[str, list[int]] = {}
        self.owner_at: dict[tuple[str, int], int] = {}
        self.lowest = 1.0  # of TOPIC's keep-probability, since the genesis
        self.keep: dict[str, float] = {}
        self.last = 0

    def owner(self, key: str) -> int:
        return self.pins.get(key, kafka_partition(key.encode(), W))

    def see(self, event: dict[str, Any]) -> None:
        epoch, body = int(event["epoch"]), event["payload"][1]
        self.last = epoch
        if event["type"] == "ROUTING_UPDATE":
            for key in [*body["assign"], *body["unassign"]]:
                before = self.owner(key)
                if key in body["assign"]:
                    self.pins[key] = body["assign"][key]
                else:
                    self.pins.pop(key, None)
                if self.owner(key) != before:
                    self.changes.setdefault(key, []).append(epoch)
        elif event["type"] == "SHEDDING":
            self.keep[body["target"]] = body["keep_probability"]
            self.lowest = min(self.lowest, keep_for(self.keep, TOPIC))

    def run_start(self, key: str, epoch: int) -> int:
        return max((c for c in self.changes.get(key, ()) if c <= epoch), default=0)


@pytest.fixture(scope="module")
def long_log(kafka_config, admin):
    """A deployment whose control log holds 1,000,000 epochs; the expected routing."""
    layout = TopicLayout(prefix=f"longlog-{uuid.uuid4().hex[:8]}", workers=W, input_partitions=2)
    create_deployment(kafka_config, layout, admin=admin, issuer="tests")  # the genesis: epoch 0
    expected = Expected()
    probes: dict[int, dict[str, int]] = {}  # epoch -> the owners of some keys then (old epochs)

    def events():
        for event in control_log(SHAPE):
            expected.see(event)
            epoch = int(event["epoch"])
            if epoch in (SHAPE.epochs - LONG_AGO, SHAPE.epochs - 5_000):
                probes[epoch] = {key_name(i): expected.owner(key_name(i)) for i in range(0, SHAPE.keys, 7)}
            if epoch == 0:
                continue  # the deployment's genesis is the same event
            yield event

    # encoded and produced by a process of its own while this one generates and folds
    written = produce_log(kafka_config, layout.name("control"), events())
    assert written == expected.last and expected.last >= SHAPE.epochs
    return layout, expected, probes


def test_a_router_starts_at_the_latest_snapshot_of_a_million_event_log(kafka_config, long_log):
    layout, expected, _ = long_log
    reader = ControlLogReader(kafka_config, layout.name("control"), initial_state(W))
    try:
        reader.read_to_end(60)
        state = reader.state
        assert state.epoch == expected.last
        assert {k.decode(): w for k, w in state.table.items()} == {
            k: w for k, w in expected.pins.items() if w != kafka_partition(k.encode(), W)
        }
        # the backward search reads at most two chunks (a snapshot every 1,000 epochs), the fold
        # at most one snapshot interval
        assert reader.events_folded <= SNAPSHOT_EVERY + 1
        assert reader.records_read <= 3 * SCAN_CHUNK + SNAPSHOT_EVERY + 1
    finally:
        reader.close()


def test_a_control_writer_starts_at_the_latest_snapshot_with_the_history(kafka_config, long_log):
    """What the controller and ``ballast control send`` read: the history too, still bounded."""
    layout, expected, _ = long_log
    reader = ControlLogReader(kafka_config, layout.name("control"), initial_state(W), history=True)
    try:
        reader.read_to_end(60)
        history = reader.state.history
        assert history is not None and reader.state.epoch == expected.last
        assert {k: r for k, r in history.runs.items() if k in expected.changes} == {
            k: c[-1] for k, c in expected.changes.items()
        }
        assert reader.events_folded <= SNAPSHOT_EVERY + 1
        assert reader.records_read <= 3 * SCAN_CHUNK + SNAPSHOT_EVERY + 1
    finally:
        reader.close()


def test_a_fresh_reduce_worker_starts_within_its_deadline_with_bounded_work_and_memory(
    kafka_config, long_log
):
    layout, expected, probes = long_log
    last = expected.last
    gc.collect()
    tracemalloc.start()
    log = OwnershipLog(kafka_config, layout.name("control"), W)
    try:
        view = log.ensure(last, timeout=60.0)  # the deadline a task has (JobSpec.control_timeout_s)
        current, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        print(f"fresh start: {log.records_read} records read, fold memory {current / 1e6:.1f} MB "
              f"held, {peak / 1e6:.1f} MB peak")  # fmt: skip
        assert view.epoch == last
        assert view.floor > last - SNAPSHOT_EVERY - 2  # it started at the latest snapshot
        assert log.records_read <= 3 * SCAN_CHUNK + SNAPSHOT_EVERY + 1
        assert peak < MEMORY_BOUND
        # a key pinned long ago keeps its run start; one never moved has run 0; every key's owner
        moved = sorted(expected.changes, key=lambda k: expected.changes[k][-1])
        oldest = moved[:20]  # the keys whose last move is the oldest
        assert expected.changes[oldest[0]][-1] < last - 100_000  # the test asks about old runs indeed
        for key in [*oldest, *moved[-20:], NEVER_MOVED]:
            assert view.run_start(key, last) == expected.run_start(key, last), key
            assert view.owner(key, last) == expected.owner(key)
            assert view.run_end(key, view.run_start(key, last), last) is None
        assert view.lowest_keep((TOPIC,), 0, last) == expected.lowest < 1.0
        assert log.loads == 0  # none of that read anything older
        # a worker holding records from 5,000 epochs back (a router that lags): read again from
        # the snapshot before them, not from the genesis
        old = SHAPE.epochs - 5_000
        before = log.records_read
        for key, owner in probes[old].items():
            assert view.owner(key, old) == owner
            assert view.run_start(key, old) == expected.run_start(key, old)
        assert log.loads == 1 and view.floor <= old
        # the search back from the current start for a snapshot at or before `old` reads at most
        # about twice the way back (its chunks double), the fold once: ~12,000 of 1,000,000
        assert log.records_read - before <= 3 * (last - old + SNAPSHOT_EVERY) + SCAN_CHUNK
        print(f"5,000 epochs back: {log.records_read - before} records read")
        # from 100,000 epochs back: the same, from the snapshot before it
        long_ago = SHAPE.epochs - LONG_AGO
        before = log.records_read
        for key, owner in probes[long_ago].items():
            assert view.owner(key, long_ago) == owner
        assert log.loads == 2 and view.floor <= long_ago
        assert log.records_read - before <= 3 * (last - long_ago + SNAPSHOT_EVERY) + SCAN_CHUNK
        print(f"{LONG_AGO:,} epochs back: {log.records_read - before} records read")
        # asked about recent epochs only, it forgets the older detail again
        log.view.compact(last - 100)
        assert view.floor == last - 100
        assert view.run_start(oldest[0], last) == expected.run_start(oldest[0], last)
    finally:
        if tracemalloc.is_tracing():
            tracemalloc.stop()
        log.close()
