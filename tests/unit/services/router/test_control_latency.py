"""A new epoch is visible at once: its markers are committed (exactly-once) or flushed
(at-least-once) as soon as the router applies it, not at the end of the commit interval, and an
idle router notices it between short slices of its consume() wait, not after the whole wait.

Each test fails on the loop before this change, which left the markers in a transaction that the
next commit-interval end committed, and blocked in one consume() for all of ``poll_timeout_ms``.
The commit interval here is an hour, so only the epoch change can have committed anything.
"""

from __future__ import annotations

import pytest

from ballast.control.state import make_event, routing_update
from tests.support import frontier
from tests.support.router_fakes import make_router, msg, routed, routed_messages

pytestmark = pytest.mark.unit

HOUR_MS = 3_600_000
INPUTS = {("in", p) for p in range(4)}


def committed_markers(router) -> list[int]:
    """Epochs of the markers a read_committed reader sees now."""
    return [b["epoch"] for br, b in routed(router) if br == "io.ballast.EpochMarker"]


def new_epoch(router) -> None:
    router.control.reader.events.append(make_event(1, *routing_update({"k": 2})))


def test_the_markers_of_a_new_epoch_are_committed_without_waiting_for_the_interval():
    router = make_router(exactly_once=True, committed={("in", 0): 0}, commit_interval_ms=HOUR_MS)
    router.consumer.script = [
        ("assign", [("in", 0)]),
        ("batch", [msg(0, 0), msg(0, 1)]),
        ("batch", [msg(0, 2)]),
    ]
    router.start()
    router.step()  # epoch 0's markers and two records, in an open transaction
    assert committed_markers(router) == []
    new_epoch(router)
    router.step()  # epoch 1 ends that transaction with its markers, committed at once
    calls = router.producer.calls
    assert calls[:3] == ["begin", "send_offsets", "commit"]
    assert committed_markers(router) == [0] * 4 + [1] * 4
    assert router.consumer.group_offsets[("in", 0)] == 2
    assert router.consumer.group_metadata[("in", 0)] == "ballast-epoch=1"
    router.stop()
    router.run()
    # the record routed after the switch is in a later transaction, under epoch 1, after its marker
    data = [(b["epoch"], b["source_offset"]) for br, b in routed(router) if br == "io.ballast.DataRecord"]
    assert data == [(0, 0), (0, 1), (1, 2)]
    assert frontier.violations(frontier.from_messages(routed_messages(router)), INPUTS) == []


def test_at_least_once_flushes_the_markers_of_a_new_epoch_at_once():
    router = make_router(exactly_once=False, committed={("in", 0): 0}, commit_interval_ms=HOUR_MS)
    router.consumer.script = [("assign", [("in", 0)]), ("batch", [msg(0, 0)])]
    router.start()
    router.step()
    new_epoch(router)
    router.step()
    sent = router.producer.sent
    last_marker = max(i for i, s in enumerate(sent) if s.topic == "t.routed" and s.key is None)
    assert committed_markers(router)[-4:] == [1] * 4
    assert router.producer.flushed > last_marker  # delivered before the router went on
    assert router.consumer.group_metadata[("in", 0)] == "ballast-epoch=1"
    router.stop()
    router.run()


def test_an_idle_router_notices_a_control_event_between_slices_of_its_wait():
    """The event arrives while consume() waits and finds nothing: it is applied and announced
    after that slice (``control_poll_ms``, 10 ms by default), within the same turn, and the wait
    then goes on until ``poll_timeout_ms`` in all, so ``--commit-when-idle`` still means "no input
    for that long"."""
    router = make_router(
        exactly_once=True, committed={("in", 0): 0}, commit_interval_ms=HOUR_MS, poll_timeout_ms=100
    )
    router.consumer.script = [("assign", [("in", 0)]), ("batch", [msg(0, 0)])]
    router.start()
    router.step()
    timeouts: list[float] = []

    def idle_consume(num_messages: int = 1, timeout: float = -1) -> list:
        timeouts.append(timeout)
        if len(timeouts) == 1:
            new_epoch(router)  # published while the router waits
        return []

    router.consumer.consume = idle_consume
    router.step()
    assert committed_markers(router) == [0] * 4 + [1] * 4
    assert router.state.epoch == 1
    assert timeouts == pytest.approx([0.01] * 10)
    router.stop()
    router.run()


def committed_data(router) -> list[int]:
    """Source offsets of the data records a read_committed reader sees now."""
    return [b["source_offset"] for br, b in routed(router) if br == "io.ballast.DataRecord"]


def test_after_an_epoch_change_transactions_are_short_for_a_while(monkeypatch):
    """Another router's markers, written after this router's first records of the new epoch, are
    visible only once this router's transaction ends (the last stable offset). So for
    ``epoch_settle_ms`` after a switch a transaction lasts at most ``epoch_settle_commit_ms``;
    after that the commit interval (an hour here) rules again. The loop before this change kept
    the first transaction of a new epoch open for the whole interval."""
    clock = [1000.0]
    monkeypatch.setattr("time.monotonic", lambda: clock[0])
    router = make_router(
        exactly_once=True,
        committed={("in", 0): 0},
        commit_interval_ms=HOUR_MS,
        epoch_settle_ms=150,
        epoch_settle_commit_ms=20,
    )
    router.consumer.script = [("assign", [("in", 0)])] + [("batch", [msg(0, i)]) for i in range(6)]
    router.start()
    router.step()  # record 0 under epoch 0, transaction open
    new_epoch(router)
    router.step()  # the switch commits record 0 and the markers; record 1 opens a transaction
    assert committed_data(router) == [0]
    clock[0] += 0.010
    router.step()  # 10 ms into the new transaction: still open
    assert committed_data(router) == [0]
    clock[0] += 0.015
    router.step()  # 25 ms: ended early
    assert committed_data(router) == [0, 1, 2, 3]
    clock[0] += 0.200  # past the settling window: the commit interval rules again
    router.step()
    clock[0] += 0.100
    router.step()
    assert committed_data(router) == [0, 1, 2, 3]
    router.stop()
    router.run()


def test_epoch_settling_can_be_switched_off(monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr("time.monotonic", lambda: clock[0])
    router = make_router(
        exactly_once=True, committed={("in", 0): 0}, commit_interval_ms=HOUR_MS, epoch_settle_ms=0
    )
    router.consumer.script = [("assign", [("in", 0)])] + [("batch", [msg(0, i)]) for i in range(3)]
    router.start()
    router.step()
    new_epoch(router)
    router.step()
    clock[0] += 0.050
    router.step()
    assert committed_data(router) == [0]
    router.stop()
    router.run()
