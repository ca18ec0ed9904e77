"""The fold (StateBuilder, and apply_event through it) against a reference copy of the pure fold.

Random event sequences, valid and invalid (gaps, conflicting and identical duplicates, workers out
of range, unroutable keys, SCALE below pinned workers, bad keep-probabilities, snapshots with and
without routed partitions, unknown types): after every event both folds must hold the same state, or
both must raise the same error with the same message, and keep folding from the same state.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Mapping
from typing import Any

import pytest

from ballast.control import state as cs
from ballast.routing.murmur2 import kafka_partition
from ballast.routing.table import RoutingTable

KEYS = [f"k{i}" for i in range(40)] + ["ключ", "", "x" * 3]


def reference_apply_event(state: cs.ControlState, event: Mapping[str, Any]) -> cs.ControlState:
    """The fold as it was written before the builder: pure, a new immutable state per event. Kept
    here, independent of the code under test, as the ground truth both folds are compared with."""
    epoch = int(event["epoch"])
    etype = event["type"]
    payload = event["payload"]
    body: Mapping[str, Any] = payload[1] if isinstance(payload, tuple) else payload
    digest = cs.event_digest(event)
    if state.started and epoch <= state.epoch:
        seen = state.digests.get(epoch)
        if seen == digest:
            return state  # an identical re-send: idempotent
        if seen is None:
            raise cs.ControlLogError(cs.unknown_duplicate(epoch, state.epoch))
        raise cs.ControlLogError(
            f"duplicate epoch {epoch} with different content (state at {state.epoch}); refusing to guess"
        )
    if epoch != state.epoch + 1 and not (
        not state.started and etype == "TABLE_SNAPSHOT" and epoch >= state.epoch
    ):
        raise cs.ControlLogError(
            f"gap in the control log: at epoch {state.epoch}, next event has epoch {epoch}"
        )
    if etype not in cs.CONTROL_TYPES:
        raise cs.ControlLogError(f"epoch {epoch}: unknown control type {etype!r}")

    entries = state.table.entries
    keep = dict(state.keep_probability)
    seeds = dict(state.shed_seed)
    num_workers = state.num_workers
    max_workers = state.max_workers
    if etype == "ROUTING_UPDATE":
        for key, worker in body.get("assign", {}).items():
            cs._check_worker(state.epoch, key, int(worker), num_workers)
            entries[cs._routing_key(epoch, key)] = int(worker)
        for key in body.get("unassign", []):
            entries.pop(cs._key_bytes(key), None)
    elif etype == "TABLE_SNAPSHOT":
        num_workers = int(body["num_workers"])
        max_workers = cs.snapshot_max_workers(epoch, body, state.max_workers)
        entries = {}
        for key, worker in body.get("table", {}).items():
            cs._check_worker(state.epoch, key, int(worker), num_workers)
            entries[cs._routing_key(epoch, key)] = int(worker)
        keep = {k: float(p) for k, p in body.get("keep_probability", {}).items()}
        seeds = {k: int(v) for k, v in body.get("shed_seed", {}).items() if k in keep}
    elif etype == "SCALE":
        num_workers = int(body["num_workers"])
        bad = {k.decode(): w for k, w in entries.items() if w >= num_workers}
        if bad:
            raise cs.ControlLogError(
                f"epoch {epoch}: SCALE to {num_workers} leaves table entries out of range: {bad}"
            )
    elif etype == "SHEDDING":
        p = float(body["keep_probability"])
        if not 0.0 <= p <= 1.0:
            raise cs.ControlLogError(f"epoch {epoch}: keep_probability {p} outside [0, 1]")
        keep[str(body["target"])] = p
        seeds[str(body["target"])] = int(body.get("seed", 0))
    # MIGRATION_STEP: an epoch of its own (workers act on it), no routing change for the router.
    if max_workers is not None and num_workers > max_workers:
        raise cs.ControlLogError(
            f"epoch {epoch}: {num_workers} workers exceed the {max_workers} routed partitions"
        )
    if num_workers < 1:
        raise cs.ControlLogError(f"epoch {epoch}: num_workers must be >= 1, got {num_workers}")
    # a pinned key keeps its worker across SCALE; pins equal to the (new) hash home drop out
    table = RoutingTable(num_workers, entries, epoch)
    if etype == "TABLE_SNAPSHOT":
        digests = {}  # a snapshot starts a new history: readers that begin here know no older epoch
    else:
        digests = {e: d for e, d in state.digests.items() if e > epoch - cs.DIGEST_WINDOW}
    digests[epoch] = digest
    return dataclasses.replace(
        state,
        epoch=epoch,
        num_workers=num_workers,
        table=table,
        keep_probability=keep,
        max_workers=max_workers,
        shed_seed=seeds,
        digests=digests,
        started=True,
    )


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
        target, p = rng.choice(["in", "*", "other"]), rng.choice([0.0, 0.3, 1.0, 1.5, -0.1])
        return ev(e, cs.shedding(target, p, seed=rng.choice([0, 1, -7, 2**40])))
    if kind < 0.88:
        n = rng.randint(0, top)
        table = {rng.choice(KEYS[:-2]): rng.randrange(max(n, 1) + 1) for _ in range(rng.randint(0, 8))}
        body: dict[str, Any] = {
            "num_workers": n,
            "table": table,
            "keep_probability": {"in": rng.random()},
            "routed_partitions": rng.choice([0, routed, routed, routed + 1]),
            "shed_seed": rng.choice([{}, {"in": 3}, {"in": 4, "gone": 5}]),
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


def error_kind(message: str) -> type:
    """What a reader may do about an error (the reference only has one kind): skip an event no
    state could take here (invalid, or not the next epoch); stop on a conflicting duplicate."""
    if message.startswith("gap in the control log"):
        return cs.EpochGapError
    if message.startswith("duplicate epoch"):
        return cs.DuplicateEpochError
    if "routed partitions, the reader has" in message:  # the reader's deployment is another
        return cs.ControlLogError
    return cs.InvalidEventError


def same_state(a: cs.ControlState, b: cs.ControlState) -> None:
    fields = ("epoch", "num_workers", "max_workers", "started")
    assert [getattr(a, f) for f in fields] == [getattr(b, f) for f in fields]
    assert a.table.num_workers == b.table.num_workers
    assert list(a.table.items()) == list(b.table.items())  # order too: SCALE's error lists entries
    assert dict(a.keep_probability) == dict(b.keep_probability)
    assert dict(a.shed_seed) == dict(b.shed_seed)
    assert dict(a.digests) == dict(b.digests)


STARTS = {
    "unstarted-8": cs.initial_state(8),
    "unstarted-4-of-8": cs.initial_state(8, 4),
    "unchecked": cs.ControlState(num_workers=3),
}


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("start", STARTS)
def test_the_fold_matches_the_reference_fold(seed, start):
    """One builder over the whole sequence (how a reader catches up) and ``apply_event`` one event
    at a time (a fresh builder each) both agree with the reference after every event."""
    rng = random.Random(seed * 1000 + len(start))
    reference = STARTS[start]
    pure = reference
    routed = reference.max_workers or 6
    builder = cs.StateBuilder(reference)
    history: list[dict] = []
    errors = applied = 0
    for _ in range(400):
        event = random_event(rng, reference.epoch, routed, history)
        expected = outcome(lambda e=event, s=reference: reference_apply_event(s, e))
        got = outcome(lambda e=event: builder.apply(e))
        one = outcome(lambda e=event, s=pure: cs.apply_event(s, e))
        assert expected[0] == got[0] == one[0], (event, expected, got, one)
        if expected[0] == "error":
            assert got[1][1] == expected[1][1] == one[1][1]  # the same message
            assert got[1][0] is one[1][0] and issubclass(got[1][0], expected[1][0])
            assert got[1][0] is error_kind(expected[1][1]), expected
            errors += 1
        else:
            advanced = expected[1] is not reference
            assert got[1] is advanced  # False: an identical re-send was ignored
            reference = expected[1]
            pure = one[1]
            applied += advanced
            if advanced:
                history.append(event)
        same_state(builder.state(), reference)
        same_state(pure, reference)
    # the sequence exercised both sides
    assert errors > 20 and applied > 100


def test_frozen_state_routes_like_a_validated_table():
    b = cs.StateBuilder(cs.initial_state(8))
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
    builder = cs.StateBuilder(cs.initial_state(4))
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
