"""The control-log fold over mutable parts: what a reader uses to catch up on a long log.

Why not :func:`ballast.control.state.apply_event` for every event: it returns a new immutable
state, so each event rebuilds the whole :class:`~ballast.routing.table.RoutingTable` (a murmur2 per
pinned key) and copies the digest map: O(table) per event, hours for 50,000 events over a
10,000-key table. :class:`StateBuilder` applies the same events to one dict of entries, kept clean
incrementally (a pin equal to the hash home is dropped when it is written, and on SCALE), and
freezes a :class:`~ballast.control.state.ControlState` only when asked (:meth:`StateBuilder.state`,
once per poll): O(event) per event, O(table) per frozen state.

It must mean exactly what ``apply_event`` means: same states, same errors with the same messages,
in the same order. tests/unit/ballast/control/test_state_builder.py folds random event sequences
(valid and invalid) both ways and compares. Each event is checked completely before anything is
changed, so after an error the builder still holds the state after the last good event, as the pure
fold does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ballast.control.state import (
    CONTROL_TYPES,
    DIGEST_WINDOW,
    ControlLogError,
    ControlState,
    _check_worker,
    _key_bytes,
    _routing_key,
    event_digest,
    snapshot_max_workers,
    unknown_duplicate,
)
from ballast.routing.murmur2 import kafka_partition
from ballast.routing.table import RoutingTable


class StateBuilder:
    """Folds events one by one into mutable parts; :meth:`state` is the immutable result."""

    def __init__(self, state: ControlState) -> None:
        self.epoch = state.epoch
        self.num_workers = state.num_workers
        self.max_workers = state.max_workers
        self.started = state.started
        self._entries: dict[bytes, int] = state.table.entries  # a copy, already clean
        self._keep: dict[str, float] = dict(state.keep_probability)
        # epoch -> digest, oldest first (epochs are folded in increasing order)
        self._digests: dict[int, str] = dict(sorted(state.digests.items()))
        self._frozen: ControlState | None = state

    def apply(self, event: Mapping[str, Any]) -> bool:
        """Fold one decoded event; False for an identical re-send (ignored). Raises
        :class:`~ballast.control.state.ControlLogError` exactly where ``apply_event`` does."""
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
                raise ControlLogError(unknown_duplicate(epoch, self.epoch))
            raise ControlLogError(
                f"duplicate epoch {epoch} with different content (state at {self.epoch}); refusing to guess"
            )
        if epoch != self.epoch + 1 and not (
            not self.started and etype == "TABLE_SNAPSHOT" and epoch >= self.epoch
        ):
            raise ControlLogError(
                f"gap in the control log: at epoch {self.epoch}, next event has epoch {epoch}"
            )
        if etype not in CONTROL_TYPES:
            raise ControlLogError(f"epoch {epoch}: unknown control type {etype!r}")

        if etype == "ROUTING_UPDATE":
            self._routing_update(epoch, body)
        elif etype == "TABLE_SNAPSHOT":
            self._snapshot(epoch, body)
        elif etype == "SCALE":
            self._scale(epoch, body)
        elif etype == "SHEDDING":
            p = float(body["keep_probability"])
            if not 0.0 <= p <= 1.0:
                raise ControlLogError(f"epoch {epoch}: keep_probability {p} outside [0, 1]")
            self._check_workers(epoch, self.num_workers, self.max_workers)
            self._keep[str(body["target"])] = p
        else:  # MIGRATION_STEP: an epoch of its own, no routing change
            self._check_workers(epoch, self.num_workers, self.max_workers)
        if etype == "TABLE_SNAPSHOT":
            self._digests = {}
        digests = self._digests
        digests[epoch] = digest
        oldest = epoch - DIGEST_WINDOW
        while next(iter(digests)) <= oldest:
            del digests[next(iter(digests))]
        self.epoch = epoch
        self.started = True
        self._frozen = None
        return True

    @staticmethod
    def _check_workers(epoch: int, num_workers: int, max_workers: int | None) -> None:
        """The checks ``apply_event`` makes on every event's resulting worker count."""
        if max_workers is not None and num_workers > max_workers:
            raise ControlLogError(
                f"epoch {epoch}: {num_workers} workers exceed the {max_workers} routed partitions"
            )
        if num_workers < 1:
            raise ControlLogError(f"epoch {epoch}: num_workers must be >= 1, got {num_workers}")

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
        self._check_workers(epoch, n, max_workers)
        self._entries = {k: w for k, w in entries.items() if w != kafka_partition(k, n)}
        self._keep = keep
        self.num_workers = n
        self.max_workers = max_workers

    def _scale(self, epoch: int, body: Mapping[str, Any]) -> None:
        n = int(body["num_workers"])
        bad = {k.decode(): w for k, w in self._entries.items() if w >= n}
        if bad:
            raise ControlLogError(f"epoch {epoch}: SCALE to {n} leaves table entries out of range: {bad}")
        self._check_workers(epoch, n, self.max_workers)
        # a pinned key keeps its worker; pins equal to the new hash home drop out
        self._entries = {k: w for k, w in self._entries.items() if w != kafka_partition(k, n)}
        self.num_workers = n

    def state(self) -> ControlState:
        """The folded state, frozen (cached until the next event changes it)."""
        if self._frozen is None:
            self._frozen = ControlState(
                num_workers=self.num_workers,
                epoch=self.epoch,
                table=RoutingTable.from_clean(self.num_workers, dict(self._entries), self.epoch),
                keep_probability=self._keep,
                max_workers=self.max_workers,
                digests=self._digests,
                started=self.started,
            )
        return self._frozen
