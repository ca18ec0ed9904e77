"""The mutable fold (StateBuilder) against the reference, the pure ``apply_event``, as ground truth.

Random event sequences, valid and invalid (gaps, conflicting and identical duplicates, workers out
of range, unroutable keys, SCALE below pinned workers, bad keep-probabilities, snapshots with and
without routed partitions, unknown types): after every event both folds must hold the same state, or
both must raise the same error with the same message, and keep folding from the same state.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from ballast.control import state as cs
from ballast.control.builder import StateBuilder
from ballast.routing.murmur2 import kafka_partition
from ballast.routing.table import RoutingTable

KEYS = [f"k{i}" for i in range(40)] + ["ключ", "", "x" * 3]


def ev(epoch: int, kind: tuple[str, dict]) -> dict:
    return cs.make_event(epoch, *kind, issued_at=1)


def random_event(rng: random.Random, epoch: int, routed: int, history: list[dict]) -> dict:
    """Mostly the next epoch with a plausible event; sometimes something a reader must refuse."""
    roll = rng.random()
    if history and roll < 0.06:
        old = rng.choice(history[-30:])
        if rng.random() < 0.5:
            return old  # an identical re-send
        return ev(old["epoch"], cs.scale(rng.randint(1, routed)))  # same epoch, other content
    e = epoch + rng.choice([2, 3, 0, -1]) if roll < 0.09 else epoch + 1  # sometimes a gap or stale
    kind = rng.random()
    top = routed + 1  # one beyond the routed partitions now and then
    if kind < 0.5:
        assign = {rng.choice(KEYS[:-2]): rng.randrange(top) for _ in range(rng.randint(0, 6))}
        if rng.random() < 0.03:
            assign[rng.choice(KEYS[-2:])] = 0  # "" cannot be routed
        unassign = [rng.choice(KEYS[:-2]) for _ in range(rng.randint(0, 3))]
        return ev(e, cs.routing_update(assign, unassign))
    if kind < 0.65:
        return ev(e, cs.scale(rng.randint(0, top)))
    if kind < 0.75:
        return ev(e, cs.shedding(rng.choice(["in", "*", "other"]), rng.choice([0.0, 0.3, 1.0, 1.5, -0.1])))
    if kind < 0.88:
        n = rng.randint(0, top)
        table = {rng.choice(KEYS[:-2]): rng.randrange(max(n, 1) + 1) for _ in range(rng.randint(0, 8))}
        body: dict[str, Any] = {
            "num_workers": n,
            "table": table,
            "keep_probability": {"in": rng.random()},
            "routed_partitions": rng.choice([0, routed, routed, routed + 1]),
        }
        return ev(e, ("TABLE_SNAPSHOT", body))
    if kind < 0.95:
        body = {"migration_id": "m", "phase": "START", "keys": [], "from_workers": [], "to_workers": []}
        return ev(e, ("MIGRATION_STEP", body))
    event = ev(e, cs.scale(2))
    event["type"] = "REWIND"  # not a control type
    return event


def outcome(fn) -> tuple[str, Any]:
    try:
        return "ok", fn()
    except Exception as exc:
        return "error", (type(exc), str(exc))


def same_state(a: cs.ControlState, b: cs.ControlState) -> None:
    fields = ("epoch", "num_workers", "max_workers", "started")
    assert [getattr(a, f) for f in fields] == [getattr(b, f) for f in fields]
    assert a.table.num_workers == b.table.num_workers
    assert list(a.table.items()) == list(b.table.items())  # order too: SCALE's error lists entries
    assert dict(a.keep_probability) == dict(b.keep_probability)
    assert dict(a.digests) == dict(b.digests)


STARTS = {
    "unstarted-8": cs.initial_state(8),
    "unstarted-4-of-8": cs.initial_state(8, 4),
    "unchecked": cs.ControlState(num_workers=3),
}


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("start", STARTS)
def test_builder_folds_exactly_like_apply_event(seed, start):
    rng = random.Random(seed * 1000 + len(start))
    reference = STARTS[start]
    routed = reference.max_workers or 6
    builder = StateBuilder(reference)
    history: list[dict] = []
    errors = applied = 0
    for _ in range(400):
        event = random_event(rng, reference.epoch, routed, history)
        expected = outcome(lambda e=event, s=reference: cs.apply_event(s, e))
        got = outcome(lambda e=event: builder.apply(e))
        assert expected[0] == got[0], (event, expected, got)
        if expected[0] == "error":
            assert got[1] == expected[1]
            errors += 1
        else:
            advanced = expected[1] is not reference
            assert got[1] is advanced  # False: an identical re-send was ignored
            reference = expected[1]
            applied += advanced
            if advanced:
                history.append(event)
        same_state(builder.state(), reference)
    # the sequence exercised both sides
    assert errors > 20 and applied > 100


def test_frozen_state_routes_like_a_validated_table():
    b = StateBuilder(cs.initial_state(8))
    b.apply(ev(0, ("TABLE_SNAPSHOT", {"num_workers": 8, "table": {}, "routed_partitions": 8})))
    pins = {f"key-{i}": (kafka_partition(f"key-{i}".encode(), 8) + 1) % 5 for i in range(500)}
    b.apply(ev(1, cs.routing_update(pins)))
    b.apply(ev(2, cs.scale(5)))
    state = b.state()
    rebuilt = RoutingTable(5, dict(state.table.items()))
    assert dict(rebuilt.items()) == dict(state.table.items())  # nothing the validation would drop
    probe = [f"key-{i}".encode() for i in range(1000)]
    assert [state.table.route(k) for k in probe] == [rebuilt.route(k) for k in probe]
    # the frozen state does not change when the builder goes on
    b.apply(ev(3, cs.routing_update({"key-1": 4})))
    assert state.epoch == 2 and b.state().epoch == 3


def test_digest_window_decides_old_duplicates_the_same_way():
    """Content is kept for the last DIGEST_WINDOW epochs, and none from before the last snapshot."""
    events = [ev(0, ("TABLE_SNAPSHOT", {"num_workers": 4, "table": {}, "routed_partitions": 4}))]
    events += [ev(e, cs.routing_update({f"k{e % 50}": e % 4})) for e in range(1, cs.DIGEST_WINDOW + 200)]
    reference = cs.fold(cs.initial_state(4), events)
    builder = StateBuilder(cs.initial_state(4))
    for e in events:
        builder.apply(e)
    same_state(builder.state(), reference)
    last = events[-1]["epoch"]
    recent, too_old = events[last - 10], events[100]
    assert cs.apply_event(reference, recent) is reference and builder.apply(recent) is False
    for fold in (lambda e: cs.apply_event(reference, e), builder.apply):
        with pytest.raises(cs.ControlLogError, match="content is not kept"):
            fold(too_old)
        with pytest.raises(cs.ControlLogError, match="different content"):
            fold(ev(last - 10, cs.scale(3)))
    # after a snapshot, the epochs before it are unknown to every reader
    snap = ev(last + 1, cs.table_snapshot(reference))
    after = cs.apply_event(reference, snap)
    assert builder.apply(snap) is True
    assert dict(after.digests) == dict(builder.state().digests) == {last + 1: cs.event_digest(snap)}
    with pytest.raises(cs.ControlLogError, match="content is not kept"):
        cs.apply_event(after, events[-1])
