"""Who owns a key at an epoch: the reduce workers' view of the routing history in the control log.

Why a history and not the current table: a worker holds a key's state for one *run* of epochs
``[start, end)`` in which the routing table sends the key to it. For a record of epoch ``e`` it must
know which run the record belongs to (:meth:`OwnershipView.run_start`), whether that run has a
known end (the key moves away at ``end``: ship the state once the frontier reaches it), and which
keys an epoch moves away (:meth:`OwnershipView.moves_at`). The control log is immutable and its
epochs are dense, so every answer is a function of the epochs folded so far: a micro-batch replayed
after a crash asks the same questions about the same epochs and gets the same answers. That is why
every query names an epoch the caller has *seen in its data* (a marker or a record carries it), and
the view refuses questions about epochs it has not folded instead of answering with less.

Only keys whose owner ever changed are kept (the keys a routing update or snapshot names); every
other key is owned by its hash home for the whole life of the deployment.

Decision: a change of the hash itself (``SCALE``, or a snapshot with another worker count) would
move an unbounded set of hashed keys, which no worker can enumerate for the receiver to wait on.
The view refuses such a log with :class:`UnsupportedOwnershipChange` (the job stops with that
message) until scaling brings its manifest of moved keys (the controller's issue).
"""

from __future__ import annotations

import bisect
import time
from collections.abc import KeysView, Mapping
from typing import Any

from ballast.control.state import ControlLogError, StateBuilder, initial_state

Move = tuple[int, int]  # (from worker, to worker)


class UnsupportedOwnershipChange(ControlLogError):
    """A control event moves hashed keys (the worker count changed): not migratable yet."""


class EpochNotFolded(LookupError):
    """A question about an epoch the view has not folded yet (call ``ensure`` first)."""


def _body(event: Mapping[str, Any]) -> Mapping[str, Any]:
    payload = event["payload"]
    return payload[1] if isinstance(payload, tuple) else payload


class OwnershipView:
    """The routing history of moved keys, folded event by event from the log's genesis."""

    def __init__(self, routed_partitions: int) -> None:
        self._builder = StateBuilder(initial_state(routed_partitions))
        self._changes: dict[str, list[tuple[int, int]]] = {}  # key -> [(epoch, owner from then)]
        self._moves: dict[int, dict[str, Move]] = {}

    @property
    def epoch(self) -> int:
        """The last epoch folded (-1 before the genesis)."""
        return self._builder.epoch if self._builder.started else -1

    @property
    def moved_keys(self) -> KeysView[str]:
        """The keys that ever moved: a live view, O(1) per membership test (asked per key and step)."""
        return self._changes.keys()

    def apply(self, event: Mapping[str, Any]) -> None:
        """Fold one event (in log order), recording which keys it moves from which worker to which."""
        builder = self._builder
        etype = event["type"]
        body = _body(event)
        genesis = not builder.started
        if etype == "SCALE" and int(body["num_workers"]) != builder.num_workers and not genesis:
            raise UnsupportedOwnershipChange(self._rehash_message(int(event["epoch"]), etype))
        if etype == "TABLE_SNAPSHOT" and not genesis and int(body["num_workers"]) != builder.num_workers:
            raise UnsupportedOwnershipChange(self._rehash_message(int(event["epoch"]), etype))
        if etype == "ROUTING_UPDATE":
            named = set(body.get("assign", {})) | set(body.get("unassign", []))
        elif etype == "TABLE_SNAPSHOT" and not genesis:
            named = {k.decode("utf-8") for k in builder.pinned()} | set(body.get("table", {}))
        else:
            named = set()
        before = {k: builder.route(k.encode("utf-8")) for k in named}
        if not builder.apply(event) or genesis:
            return
        epoch = builder.epoch
        moves: dict[str, Move] = {}
        for key, old in before.items():
            new = builder.route(key.encode("utf-8"))
            if new != old:
                moves[key] = (old, new)
                self._changes.setdefault(key, [(0, old)]).append((epoch, new))
        if moves:
            self._moves[epoch] = moves

    @staticmethod
    def _rehash_message(epoch: int, etype: str) -> str:
        return (
            f"epoch {epoch}: {etype} changes the number of hashed workers; the reduce job cannot "
            "migrate hashed keys yet (it moves only keys the routing table names)"
        )

    def _check(self, epoch: int) -> None:
        if epoch > self.epoch:
            raise EpochNotFolded(f"epoch {epoch} is beyond the control log folded so far ({self.epoch})")

    def owner(self, key: str, epoch: int) -> int:
        """The worker routing sent ``key`` to under ``epoch``."""
        self._check(epoch)
        changes = self._changes.get(key)
        if changes is None:
            return self._builder.route(key.encode("utf-8"))
        return changes[bisect.bisect_right(changes, (epoch, 1 << 62)) - 1][1]

    def run_start(self, key: str, epoch: int) -> int:
        """First epoch of the run of epochs (same owner, no interruption) that contains ``epoch``."""
        self._check(epoch)
        changes = self._changes.get(key)
        if changes is None:
            return 0
        return changes[bisect.bisect_right(changes, (epoch, 1 << 62)) - 1][0]

    def run_end(self, key: str, start: int, known: int) -> int | None:
        """The epoch at which the run starting at ``start`` ends, if that is known by ``known``."""
        self._check(known)
        for epoch, _owner in self._changes.get(key, ()):
            if start < epoch <= known:
                return epoch
        return None

    def moves_at(self, epoch: int) -> Mapping[str, Move]:
        """The keys ``epoch`` moves, each with its (old owner, new owner)."""
        self._check(epoch)
        return self._moves.get(epoch, {})


class OwnershipLog:
    """An :class:`OwnershipView` kept up to date from the control topic (read from its genesis).

    Why from the genesis and not the latest snapshot: a worker may hold state from any epoch back
    (a key that moved long ago and never again), and its run start is only known from the move.
    """

    def __init__(self, kafka: Any, topic: str, routed_partitions: int) -> None:
        from ballast.control.log import ControlLogReader

        self.view = OwnershipView(routed_partitions)
        self._reader = ControlLogReader(kafka, topic, start_offset=0)

    def ensure(self, epoch: int, timeout: float = 60.0) -> OwnershipView:
        """The view, folded at least to ``epoch`` (which the caller saw in its data, so it exists)."""
        deadline = time.monotonic() + timeout
        while self.view.epoch < epoch:
            if time.monotonic() > deadline:
                raise ControlLogError(
                    f"control log: epoch {epoch} was seen in the data but the log reached only "
                    f"{self.view.epoch} within {timeout:g} s"
                )
            for event in self._reader.poll(timeout=0.2):
                self.view.apply(event)
        return self.view

    def close(self) -> None:
        self._reader.close()


_SHARED: dict[tuple[str, str, int], OwnershipLog] = {}


def shared_log(kafka: Any, topic: str, routed_partitions: int) -> OwnershipLog:
    """One log follower per Python worker process and control topic (Spark reuses its workers)."""
    key = (kafka.connection, topic, routed_partitions)
    log = _SHARED.get(key)
    if log is None:
        log = _SHARED[key] = OwnershipLog(kafka, topic, routed_partitions)
    return log
