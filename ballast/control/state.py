"""The control log's meaning: a pure state machine over control events (no Kafka here).

Why a pure fold: every router (and later the controller, the workers and the shedder) must derive
the *same* routing state from the same log, and must notice a broken log instead of guessing. So
:class:`ControlState` is immutable and :func:`apply_event` is a total function that either returns
the next state or raises :class:`ControlLogError`: epochs are dense (event e+1 follows e), a gap is
an error, a duplicate epoch is ignored only when its content is identical (a retried send), and a
``TABLE_SNAPSHOT`` lets a reader that starts at it (instead of offset 0) begin there.

Epoch 0 is in the log too: its first event is the *genesis*, a ``TABLE_SNAPSHOT`` at epoch 0 that
records the routed partitions and the active workers (``ballast topics create`` writes it, see
:mod:`ballast.control.genesis`), so no process takes epoch 0 from its own flags.

Why the content of only the recent epochs is kept (:data:`DIGEST_WINDOW`, and none from before the
last snapshot): a state that remembered every epoch's digest would grow with the log, and a reader
that starts at the latest snapshot cannot know the older ones anyway. Every reader, wherever it
started, keeps the same window, so all of them accept or refuse the same duplicate.
:class:`StateBuilder` is the one implementation of the fold, over mutable parts (a reader catching
up on a long log keeps one); :func:`apply_event` is one event through it.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from ballast.control.history import History, keep_for
from ballast.routing.murmur2 import kafka_partition
from ballast.routing.table import InvalidKeyError, RoutingTable, check_key

CONTROL_SCHEMA = "io.ballast.ControlEvent"
CONTROL_TYPES = ("ROUTING_UPDATE", "TABLE_SNAPSHOT", "MIGRATION_STEP", "SCALE", "SHEDDING", "SCALING")
PAYLOAD_RECORD = {
    "ROUTING_UPDATE": "io.ballast.RoutingUpdate",
    "TABLE_SNAPSHOT": "io.ballast.TableSnapshot",
    "MIGRATION_STEP": "io.ballast.MigrationStep",
    "SCALE": "io.ballast.Scale",
    "SHEDDING": "io.ballast.Shedding",
    "SCALING": "io.ballast.ScalingDecision",
}


# epochs whose content (digest) a state keeps, to tell an identical re-send from a conflicting one
DIGEST_WINDOW = 1000


class ControlLogError(RuntimeError):
    """The log cannot be folded: a gap, a conflicting duplicate, or an invalid event."""


class InvalidEventError(ControlLogError):
    """An event that no state could take at its epoch (an unknown type, a key that cannot be
    routed, a worker out of range, ...): checked before anything changes, so a reader can skip it."""


class EpochGapError(ControlLogError):
    """The event's epoch is not the next one: it is not the event that follows the state."""


class DuplicateEpochError(ControlLogError):
    """An epoch the state has already folded, with other content (or content no longer kept): two
    writers disagree about the log. A reader stops rather than choose between them."""


def _freeze(m: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return MappingProxyType(dict(m or {}))


def event_digest(event: Mapping[str, Any]) -> str:
    """Identity of an event's *content* (type + payload), ignoring issuer and issue time."""
    payload = event["payload"]
    body = payload[1] if isinstance(payload, tuple) else payload
    blob = json.dumps([event["type"], body], sort_keys=True, default=repr)
    return hashlib.sha256(blob.encode()).hexdigest()


@dataclass(frozen=True)
class ControlState:
    """Routing state after folding the log up to ``epoch`` (epoch 0 = hash-only, nothing applied).

    ``table`` is the one :class:`~ballast.routing.table.RoutingTable` (bytes keys, deviations from
    the hash only); ``state.table.route(key)`` is ``F(k)`` at this epoch. ``max_workers`` (the
    routed topic's partition count) bounds ``num_workers`` and every table entry; ``None`` means
    unchecked. ``started`` is False until the first event is folded, which is
    what lets a reader begin at a snapshot. ``history``: the runs, moduli and keep floors since the
    log's origin (:mod:`ballast.control.history`) when the fold tracked them, else None; snapshots
    of this state carry it. Never changed once in a state, and not part of equality (two readers
    with and without it agree about the routing).
    """

    num_workers: int
    epoch: int = 0
    table: RoutingTable | Mapping[bytes | str, int] = field(default_factory=dict)
    keep_probability: Mapping[str, float] = field(default_factory=dict)
    max_workers: int | None = None
    shed_seed: Mapping[str, int] = field(default_factory=dict)
    digests: Mapping[int, str] = field(default_factory=dict)
    started: bool = False
    history: History | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.table, RoutingTable) or self.table.num_workers != self.num_workers:
            entries = {_key_bytes(k): int(w) for k, w in self.table.items()}
            try:
                object.__setattr__(self, "table", RoutingTable(self.num_workers, entries, self.epoch))
            except ValueError as exc:
                raise ControlLogError(str(exc)) from None
        object.__setattr__(self, "keep_probability", _freeze(self.keep_probability))
        object.__setattr__(self, "shed_seed", _freeze(self.shed_seed))
        object.__setattr__(self, "digests", _freeze(self.digests))
        if self.num_workers < 1:
            raise ControlLogError(f"num_workers must be >= 1, got {self.num_workers}")
        if self.max_workers is not None and self.num_workers > self.max_workers:
            raise ControlLogError(
                f"num_workers {self.num_workers} exceeds the {self.max_workers} routed partitions"
            )

    def keep_for(self, target: str) -> float:
        """Keep-probability of an input topic / job: its own setting, else ``*``, else 1.0."""
        return keep_for(self.keep_probability, target)

    def seed_for(self, target: str) -> int:
        """Seed of the shedding setting in force for ``target`` (the one :meth:`keep_for` reads:
        its own, else ``*``'s; 0 without either). The keep draw is
        :func:`ballast.routing.shedding_sample.draw` under this seed."""
        kp = self.keep_probability
        setting = target if target in kp else "*"
        return int(self.shed_seed.get(setting, 0))


def initial_state(routed_partitions: int, active_workers: int = 0) -> ControlState:
    """Hash over ``active_workers`` (0: all routed partitions), empty table, nothing folded yet.

    What a reader assumes before the log's genesis, which replaces it (only ``max_workers``, the
    routed partitions, is checked against the genesis); the genesis itself states the same thing.
    """
    return ControlState(num_workers=active_workers or routed_partitions, max_workers=routed_partitions)


def _key_bytes(key: bytes | str) -> bytes:
    """Avro map keys arrive as ``str``; routing keys are bytes (their UTF-8 encoding)."""
    return key.encode("utf-8") if isinstance(key, str) else bytes(key)


def _routing_key(epoch: int, key: str) -> bytes:
    try:
        return check_key(_key_bytes(key))
    except (InvalidKeyError, UnicodeEncodeError) as exc:
        raise InvalidEventError(f"epoch {epoch}: key {key!r} cannot be routed: {exc}") from None


def _check_worker(at: int, key: str, worker: int, num_workers: int) -> None:
    """``at``: the epoch of the state the event is folded into (the message names ``at + 1``)."""
    if not 0 <= worker < num_workers:
        raise InvalidEventError(
            f"epoch {at + 1}: key {key!r} -> worker {worker} outside 0..{num_workers - 1}"
        )


def apply_event(state: ControlState, event: Mapping[str, Any]) -> ControlState:
    """Fold one decoded ControlEvent into ``state``; raise :class:`ControlLogError` rather than skip.

    One event through :class:`StateBuilder` (the one implementation of the fold), frozen at once:
    O(table) per event, fine for one event; a reader catching up keeps one builder instead.
    """
    builder = StateBuilder(state)
    return builder.state() if builder.apply(event) else state


def unknown_duplicate(epoch: int, at: int) -> str:
    """Why a duplicate of an epoch whose content is no longer kept is refused."""
    return (
        f"duplicate epoch {epoch} (state at {at}) from before the last snapshot or the last "
        f"{DIGEST_WINDOW} epochs, whose content is not kept; cannot tell a re-send from a conflict"
    )


def snapshot_max_workers(epoch: int, body: Mapping[str, Any], max_workers: int | None) -> int | None:
    """The routed partitions after a snapshot: the ones it records (0: unknown, keep the reader's).

    A snapshot that records a count different from what the reader knows means the routed topic
    changed under the log (partitions are fixed for the life of a deployment): refuse it.
    """
    recorded = int(body.get("routed_partitions", 0) or 0)
    if recorded < 0:
        raise InvalidEventError(f"epoch {epoch}: routed_partitions must be >= 0, got {recorded}")
    if recorded == 0:
        return max_workers
    if max_workers is not None and recorded != max_workers:  # the reader's deployment, not the event
        raise ControlLogError(
            f"epoch {epoch}: the snapshot records {recorded} routed partitions, the reader has {max_workers}"
        )
    return recorded


def is_base_snapshot(event: Mapping[str, Any]) -> bool:
    """A ``TABLE_SNAPSHOT`` that records the routed partitions: a reader can start its fold there."""
    if event.get("type") != "TABLE_SNAPSHOT":
        return False
    payload = event["payload"]
    body = payload[1] if isinstance(payload, tuple) else payload
    return int(body.get("routed_partitions", 0) or 0) > 0


def fold(state: ControlState, events: Iterable[Mapping[str, Any]]) -> ControlState:
    for e in events:
        state = apply_event(state, e)
    return state


# --- building events ---------------------------------------------------------------------------------


def make_event(
    epoch: int,
    etype: str,
    body: Mapping[str, Any],
    issuer: str = "ballast-control-cli",
    issued_at: int | None = None,
    request_id: str = "",
) -> dict[str, Any]:
    """A ControlEvent dict ready for the codec (payload in fastavro's tuple notation)."""
    if etype not in PAYLOAD_RECORD:
        raise ValueError(f"unknown control type {etype!r}")
    return {
        "epoch": int(epoch),
        "issued_at": int(time.time() * 1000) if issued_at is None else int(issued_at),
        "issuer": issuer,
        "type": etype,
        "request_id": request_id,
        "payload": (PAYLOAD_RECORD[etype], dict(body)),
    }


def routing_update(
    assign: Mapping[str, int], unassign: Iterable[str] = (), reason: str = "", migration_id: str = ""
) -> tuple[str, dict]:
    return "ROUTING_UPDATE", {
        "assign": {k: int(w) for k, w in assign.items()},
        "unassign": list(unassign),
        "reason": reason,
        "migration_id": migration_id,
    }


def migration_step(
    migration_id: str,
    phase: str,
    keys: Iterable[str] = (),
    from_workers: Iterable[int] = (),
    to_workers: Iterable[int] = (),
    reason: str = "",
) -> tuple[str, dict]:
    """A ``MIGRATION_STEP`` event's body: START, STATE_SENT, DONE or ABORT of a paced migration."""
    return "MIGRATION_STEP", {
        "migration_id": migration_id,
        "phase": phase,
        "keys": list(keys),
        "from_workers": [int(w) for w in from_workers],
        "to_workers": [int(w) for w in to_workers],
        "reason": reason,
    }


def table_snapshot(state: ControlState) -> tuple[str, dict]:
    """The whole state as one event; it records the routed partitions (0 when the state has none)
    and the history when the state has it (a reader that needs it can start here)."""
    return "TABLE_SNAPSHOT", {
        "num_workers": state.num_workers,
        "table": {k.decode("utf-8"): w for k, w in state.table.items()},
        "keep_probability": dict(state.keep_probability),
        "routed_partitions": state.max_workers or 0,
        "shed_seed": dict(state.shed_seed),
        "history": None if state.history is None else state.history.to_avro(),
    }


def snapshot_history(event: Mapping[str, Any]) -> History | None:
    """The history a ``TABLE_SNAPSHOT`` carries (None: none, or not a snapshot)."""
    if event.get("type") != "TABLE_SNAPSHOT":
        return None
    payload = event["payload"]
    body = payload[1] if isinstance(payload, tuple) else payload
    return History.from_avro(body.get("history"))


def scale(num_workers: int, reason: str = "") -> tuple[str, dict]:
    return "SCALE", {"num_workers": int(num_workers), "reason": reason}


def shedding(target: str, keep_probability: float, reason: str = "", seed: int = 0) -> tuple[str, dict]:
    """A ``SHEDDING`` event's body: keep each record of ``target`` iff its draw under ``seed`` is
    below ``keep_probability`` (:mod:`ballast.routing.shedding_sample`)."""
    return "SHEDDING", {
        "target": target,
        "keep_probability": float(keep_probability),
        "reason": reason,
        "seed": int(seed),
    }


# --- the fold over mutable parts ----------------------------------------------------------------------


class StateBuilder:
    """Folds events one by one into mutable parts; :meth:`state` is the immutable result.

    Why mutable parts: an immutable state per event rebuilds the whole routing table and copies
    the digest map, O(table) per event: hours for 50,000 events over a 10,000-key table. The
    builder applies events to one dict of entries, kept clean incrementally (a pin equal to the
    hash home is dropped when written, and on SCALE), and freezes a :class:`ControlState` only
    when asked (once per poll): O(event) per event. Each event is checked completely before
    anything changes, so after an error the builder still holds the state after the last good
    event. tests/unit/ballast/control/test_state_builder.py folds random event sequences through it
    and through a reference copy of the old pure fold, and compares states and errors.

    **History** (:mod:`ballast.control.history`): a builder tracks it when its state has one, or,
    with ``history=True``, from its first event on (a base snapshot: the history it carries, else
    the origin's; the caller starts there only at a snapshot that carries one or at the origin).
    A snapshot folded later keeps the builder's own history: it is the one the writer wrote.
    """

    def __init__(self, state: ControlState, *, history: bool = False) -> None:
        self.epoch = state.epoch
        self.num_workers = state.num_workers
        self.max_workers = state.max_workers
        self.started = state.started
        self._entries: dict[bytes, int] = state.table.entries  # a copy, already clean
        self._keep: dict[str, float] = dict(state.keep_probability)
        self._seed: dict[str, int] = dict(state.shed_seed)
        # epoch -> digest, oldest first (epochs are folded in increasing order)
        self._digests: dict[int, str] = dict(sorted(state.digests.items()))
        self._history: History | None = None if state.history is None else state.history.copy()
        self._track = self._history is not None or (history and not state.started)
        self._frozen: ControlState | None = state

    @property
    def history(self) -> History | None:
        """The history as of :attr:`epoch` (the builder's own: do not change it)."""
        return self._history

    def apply(self, event: Mapping[str, Any]) -> bool:
        """Fold one decoded event; False for an identical re-send (ignored). Raises
        :class:`~ballast.control.state.ControlLogError` (gap, conflicting duplicate, invalid event)."""
        epoch = int(event["epoch"])
        etype = event["type"]
        payload = event["payload"]
        body: Mapping[str, Any] = payload[1] if isinstance(payload, tuple) else payload
        digest = event_digest(event)
        if self.started and epoch <= self.epoch:
            seen = self._digests.get(epoch)
            if seen == digest:
                return False
            if seen is None:
                raise DuplicateEpochError(unknown_duplicate(epoch, self.epoch))
            raise DuplicateEpochError(
                f"duplicate epoch {epoch} with different content (state at {self.epoch}); refusing to guess"
            )
        if epoch != self.epoch + 1 and not (
            not self.started and etype == "TABLE_SNAPSHOT" and epoch >= self.epoch
        ):
            raise EpochGapError(
                f"gap in the control log: at epoch {self.epoch}, next event has epoch {epoch}"
            )
        if etype not in CONTROL_TYPES:
            raise InvalidEventError(f"epoch {epoch}: unknown control type {etype!r}")

        owners = self._owners_before(etype, body) if self._track and self.started else None
        n_before = self.num_workers
        if etype == "ROUTING_UPDATE":
            self._routing_update(epoch, body)
        elif etype == "TABLE_SNAPSHOT":
            self._snapshot(epoch, body)
        elif etype == "SCALE":
            self._scale(epoch, body)
        elif etype == "SHEDDING":
            p = float(body["keep_probability"])
            if not 0.0 <= p <= 1.0:
                raise InvalidEventError(f"epoch {epoch}: keep_probability {p} outside [0, 1]")
            self._check_workers(epoch, self.num_workers, self.max_workers)
            target = str(body["target"])
            self._keep[target] = p
            # an event written before the seed existed, or built without one, means seed 0
            self._seed[target] = int(body.get("seed", 0))
        elif etype == "SCALING":  # a decision on record; the SCALE that acts on it is its own event
            if int(body["to_instances"]) < 1 or int(body["from_instances"]) < 0:
                raise InvalidEventError(f"epoch {epoch}: a scaling decision needs to_instances >= 1")
            self._check_workers(epoch, self.num_workers, self.max_workers)
        else:  # MIGRATION_STEP: an epoch of its own, no routing change
            self._check_workers(epoch, self.num_workers, self.max_workers)
        if etype == "TABLE_SNAPSHOT":
            self._digests = {}
        digests = self._digests
        digests[epoch] = digest
        oldest = epoch - DIGEST_WINDOW
        while next(iter(digests)) <= oldest:
            del digests[next(iter(digests))]
        if self._track:
            self._advance_history(epoch, etype, body, owners, n_before)
        self.epoch = epoch
        self.started = True
        self._frozen = None
        return True

    def _owners_before(self, etype: str, body: Mapping[str, Any]) -> dict[bytes, int]:
        """The owner before the event of every key whose owner it may change (read-only: the event
        is still being checked). On a possible change of the modulus, every key ever pinned too."""
        if etype == "ROUTING_UPDATE":
            named = [*body.get("assign", {}), *body.get("unassign", [])]
        elif etype in ("TABLE_SNAPSHOT", "SCALE"):
            named = list(body.get("table", {})) if etype == "TABLE_SNAPSHOT" else []
            named.extend(k.decode("utf-8") for k in self._entries)
            assert self._history is not None
            if int(body["num_workers"]) != self.num_workers:
                named.extend(self._history.runs)
        else:
            return {}
        owners = {}
        for key in named:
            try:
                kb = _key_bytes(key)
            except UnicodeEncodeError:
                continue  # the fold refuses the event
            owners[kb] = self.route(kb)
        return owners

    def _advance_history(
        self, epoch: int, etype: str, body: Mapping[str, Any], owners: dict[bytes, int] | None, n_before: int
    ) -> None:
        if owners is None:  # the first event: a base snapshot
            adopted = History.from_avro(body.get("history")) if etype == "TABLE_SNAPSHOT" else None
            self._history = adopted or History.origin(epoch, self.num_workers, self._entries, self._keep)
            return
        history = self._history
        assert history is not None
        after = {kb: (before, self.route(kb)) for kb, before in owners.items()}
        keep = self._keep if etype in ("SHEDDING", "TABLE_SNAPSHOT") else None
        history.advance(epoch, after, self._entries, self.num_workers, keep)

    @staticmethod
    def _check_workers(epoch: int, num_workers: int, max_workers: int | None) -> None:
        """The checks every event's resulting worker count must pass."""
        if max_workers is not None and num_workers > max_workers:
            raise InvalidEventError(
                f"epoch {epoch}: {num_workers} workers exceed the {max_workers} routed partitions"
            )
        if num_workers < 1:
            raise InvalidEventError(f"epoch {epoch}: num_workers must be >= 1, got {num_workers}")

    def _routing_update(self, epoch: int, body: Mapping[str, Any]) -> None:
        n = self.num_workers
        changes = []
        for key, worker in body.get("assign", {}).items():
            _check_worker(self.epoch, key, int(worker), n)
            changes.append((_routing_key(epoch, key), int(worker)))
        removed = [_key_bytes(key) for key in body.get("unassign", [])]
        self._check_workers(epoch, n, self.max_workers)
        entries = self._entries
        for key, worker in changes:
            if worker == kafka_partition(key, n):
                entries.pop(key, None)  # back to its hash home: no entry
            else:
                entries[key] = worker
        for key in removed:
            entries.pop(key, None)

    def _snapshot(self, epoch: int, body: Mapping[str, Any]) -> None:
        n = int(body["num_workers"])
        max_workers = snapshot_max_workers(epoch, body, self.max_workers)
        entries: dict[bytes, int] = {}
        for key, worker in body.get("table", {}).items():
            _check_worker(self.epoch, key, int(worker), n)
            entries[_routing_key(epoch, key)] = int(worker)
        keep = {k: float(p) for k, p in body.get("keep_probability", {}).items()}
        seeds = {k: int(s) for k, s in body.get("shed_seed", {}).items() if k in keep}
        self._check_workers(epoch, n, max_workers)
        self._entries = {k: w for k, w in entries.items() if w != kafka_partition(k, n)}
        self._keep = keep
        self._seed = seeds
        self.num_workers = n
        self.max_workers = max_workers

    def _scale(self, epoch: int, body: Mapping[str, Any]) -> None:
        n = int(body["num_workers"])
        bad = {k.decode(): w for k, w in self._entries.items() if w >= n}
        if bad:
            raise InvalidEventError(f"epoch {epoch}: SCALE to {n} leaves table entries out of range: {bad}")
        self._check_workers(epoch, n, self.max_workers)
        # a pinned key keeps its worker; pins equal to the new hash home drop out
        self._entries = {k: w for k, w in self._entries.items() if w != kafka_partition(k, n)}
        self.num_workers = n

    def route(self, key: bytes) -> int:
        """``F(k)`` at the builder's epoch, without freezing a state (the reduce job's ownership
        view asks this before and after every event for the keys the event names)."""
        worker = self._entries.get(key)
        return kafka_partition(key, self.num_workers) if worker is None else worker

    def pin(self, key: bytes) -> int | None:
        """``key``'s table entry at the builder's epoch (None: it follows the hash)."""
        return self._entries.get(key)

    def pinned(self) -> frozenset[bytes]:
        """The keys with a table entry at the builder's epoch."""
        return frozenset(self._entries)

    def keep_probabilities(self) -> dict[str, float]:
        """The ``SHEDDING`` settings at the builder's epoch (a copy; the reduce keeps their history)."""
        return dict(self._keep)

    def state(self) -> ControlState:
        """The folded state, frozen (cached until the next event changes it)."""
        if self._frozen is None:
            self._frozen = ControlState(
                num_workers=self.num_workers,
                epoch=self.epoch,
                table=RoutingTable.from_clean(self.num_workers, dict(self._entries), self.epoch),
                keep_probability=self._keep,
                max_workers=self.max_workers,
                shed_seed=self._seed,
                digests=self._digests,
                started=self.started,
                history=None if self._history is None else self._history.copy(),
            )
        return self._frozen
