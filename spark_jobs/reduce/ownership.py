"""Who owns a key at an epoch: the reduce workers' view of the routing history in the control log.

Why a history and not the current table: a worker holds a key's state for one *run* of epochs
``[start, end)`` in which routing sends the key to it. For a record of epoch ``e`` it must know
which run the record belongs to (:meth:`OwnershipView.run_start`), whether that run has a known end
(the key moves away at ``end``: ship the state once the frontier reaches it), and which keys an
epoch moves (:meth:`OwnershipView.moves_at`, :meth:`OwnershipView.rehash_at`). The control log is
immutable and its epochs are dense, so every answer about an epoch is a function of the log up to
that epoch: a replayed micro-batch gets the same answers. The view refuses questions about epochs
it has not folded instead of answering with less.

Two kinds of ownership change:

* **Table moves**: a ``ROUTING_UPDATE`` (or a snapshot with another table) pins keys to workers or
  hands them back to the hash. The view records, per key it ever named, the epochs its pin changed.
* **Rehash**: a ``SCALE`` (or a snapshot with another worker count) changes the hash modulus, so
  every unpinned key whose ``murmur2 % n`` changes moves, an unbounded set the view does not list:
  it records the epochs the modulus changed, and owners follow from the key itself
  (:meth:`OwnershipView.owners` does it for many keys at once). The old owners know the keys they
  hold and ship them; the new owners learn from each old owner's *shipment done* announcement
  that no more chunks will come (the reduce engine).

**Keep-probabilities.** ``SHEDDING`` events set the probability with which routers keep each
record of an input topic. A router applies an event together with its epoch (it switches both at
a transaction boundary), so the record's envelope epoch names the settings it was kept under: the
view keeps their history (:meth:`OwnershipView.keep_probabilities`), and the engine scales each
window's results by the probabilities its records survived.

**When each epoch began.** A window whose shed records were *all* dropped saw only records kept
for sure, so its own records cannot tell it that something was shed. The engine asks instead which
settings were in force while the window's records could have been routed: from the epoch in force
at a log time (:meth:`OwnershipView.epoch_at_time`) to the log's end. The time of an epoch is its
control record's Kafka timestamp, which is in the log itself, so a replay answers the same. Times
are made non-decreasing (a writer whose clock ran behind an earlier one's counts as appending at
the earlier time): that can only move an epoch's start later, hence the answer earlier, and an
earlier first epoch covers more settings. Events folded without a timestamp (older callers) leave
the answer at the last timed event before them, or at the first epoch folded: never later than
the truth.

Memory: one entry per key ever named by the table (not per key ever seen), one per modulus change,
one per change of the shedding settings and one (epoch, time) pair per event folded with a time;
rebuilt from the log's genesis when a worker process starts.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import KeysView, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from ballast.control.state import ControlLogError, StateBuilder, initial_state, keep_for
from ballast.routing.murmur2 import kafka_partition, kafka_partition_array, murmur2_array

Move = tuple[int, int]  # (from worker, to worker)
UNPINNED = -1


class EpochNotFolded(LookupError):
    """A question about an epoch the view has not folded yet (call ``ensure`` first)."""


def _body(event: Mapping[str, Any]) -> Mapping[str, Any]:
    payload = event["payload"]
    return payload[1] if isinstance(payload, tuple) else payload


class OwnershipView:
    """The routing history, folded event by event from the log's genesis."""

    def __init__(self, routed_partitions: int) -> None:
        self._builder = StateBuilder(initial_state(routed_partitions))
        self._pins: dict[str, list[tuple[int, int]]] = {}  # key -> [(epoch, pinned worker | -1)]
        self._moduli: list[tuple[int, int]] = []  # [(epoch, hash modulus from then)], epoch ascending
        self._rehash: list[int] = []  # epochs at which the modulus changed
        self._moves: dict[int, dict[str, Move]] = {}
        # [(epoch, the SHEDDING settings from then on)], epoch ascending, one entry per change
        self._keeps: list[tuple[int, dict[str, float]]] = []
        self._keep_epochs: list[int] = []
        self._sheds = False  # some setting below 1 was ever in force
        self._first = 0  # the first epoch folded (the genesis)
        # events folded with their log time: epochs ascending, times non-decreasing (running max)
        self._timed_epochs: list[int] = []
        self._times: list[int] = []

    # --- folding ----------------------------------------------------------------------------------

    @property
    def epoch(self) -> int:
        """The last epoch folded (-1 before the genesis)."""
        return self._builder.epoch if self._builder.started else -1

    @property
    def moved_keys(self) -> KeysView[str]:
        """The keys the table ever named: a live view, O(1) per membership test."""
        return self._pins.keys()

    @property
    def rehash_epochs(self) -> Sequence[int]:
        return self._rehash

    def apply(self, event: Mapping[str, Any], log_ms: int | None = None) -> None:
        """Fold one event (in log order); ``log_ms``: its control record's Kafka timestamp, when
        the caller read it from the topic (see :meth:`epoch_at_time`)."""
        builder = self._builder
        etype = event["type"]
        body = _body(event)
        genesis = not builder.started
        if etype == "ROUTING_UPDATE":
            named = set(body.get("assign", {})) | set(body.get("unassign", []))
        elif etype in ("TABLE_SNAPSHOT", "SCALE") and not genesis:
            named = {k.decode("utf-8") for k in builder.pinned()} | set(body.get("table", {}))
        else:
            named = set()
        n_before = builder.num_workers
        before = {k: builder.route(k.encode("utf-8")) for k in named}
        if not builder.apply(event):
            return
        epoch = builder.epoch
        self._keep_history(epoch)
        if log_ms is not None:
            self._timed_epochs.append(epoch)
            self._times.append(max(int(log_ms), self._times[-1]) if self._times else int(log_ms))
        if genesis:
            self._first = epoch
            self._moduli = [(epoch, builder.num_workers)]
            for kb in builder.pinned():  # pinned from the start: owned by their pin, not their home
                self._pins[kb.decode("utf-8")] = [(0, builder.route(kb))]
            return
        if builder.num_workers != n_before:
            self._moduli.append((epoch, builder.num_workers))
            self._rehash.append(epoch)
        pinned = builder.pinned()
        moves: dict[str, Move] = {}
        for key in named:
            kb = key.encode("utf-8")
            pin = builder.route(kb) if kb in pinned else UNPINNED
            history = self._pins.get(key)
            if pin != (history[-1][1] if history else UNPINNED):
                if history is None:
                    history = self._pins[key] = [(0, UNPINNED)]
                history.append((epoch, pin))
            new = builder.route(kb)
            if new != before[key] and builder.num_workers == n_before:
                moves[key] = (before[key], new)
        if moves:
            self._moves[epoch] = moves

    def _keep_history(self, epoch: int) -> None:
        keep = self._builder.keep_probabilities()
        if self._keeps and self._keeps[-1][1] == keep:
            return
        self._keeps.append((epoch, keep))
        self._keep_epochs.append(epoch)
        self._sheds = self._sheds or any(p < 1.0 for p in keep.values())

    def _check(self, epoch: int) -> None:
        if epoch > self.epoch:
            raise EpochNotFolded(f"epoch {epoch} is beyond the control log folded so far ({self.epoch})")

    # --- questions about one key -----------------------------------------------------------------

    def modulus(self, epoch: int) -> int:
        """The hash modulus (active workers) at ``epoch``."""
        self._check(epoch)
        i = bisect.bisect_right(self._moduli, (epoch, 1 << 62)) - 1
        return self._moduli[max(i, 0)][1]

    def _pin(self, key: str, epoch: int) -> int:
        history = self._pins.get(key)
        if history is None:
            return UNPINNED
        return history[bisect.bisect_right(history, (epoch, 1 << 62)) - 1][1]

    def owner(self, key: str, epoch: int) -> int:
        """The worker routing sent ``key`` to under ``epoch``."""
        self._check(epoch)
        pin = self._pin(key, epoch)
        return pin if pin != UNPINNED else kafka_partition(key.encode("utf-8"), self.modulus(epoch))

    def _changes(self, key: str) -> list[int]:
        """Epochs at which ``key``'s owner may change: its pin changes and every rehash."""
        pins = [e for e, _ in self._pins.get(key, ()) if e > 0]
        return sorted(set(pins) | set(self._rehash)) if self._rehash else pins

    def run_start(self, key: str, epoch: int) -> int:
        """First epoch of the run of epochs (same owner, no interruption) that contains ``epoch``."""
        self._check(epoch)
        changes = self._changes(key)
        for c in reversed(changes[: bisect.bisect_right(changes, epoch)]):
            if self.owner(key, c) != self.owner(key, c - 1):
                return c
        return 0

    def run_end(self, key: str, start: int, known: int) -> int | None:
        """The epoch at which the run starting at ``start`` ends, if that is known by ``known``."""
        self._check(known)
        changes = self._changes(key)
        for c in changes[bisect.bisect_right(changes, start) :]:
            if c > known:
                return None
            if self.owner(key, c) != self.owner(key, c - 1):
                return c
        return None

    def moves_at(self, epoch: int) -> Mapping[str, Move]:
        """The table moves of ``epoch``: each key with its (old owner, new owner)."""
        self._check(epoch)
        return self._moves.get(epoch, {})

    def rehash_at(self, epoch: int) -> tuple[int, int] | None:
        """(modulus before, modulus after) when ``epoch`` changed the hash modulus, else None."""
        self._check(epoch)
        i = bisect.bisect_left(self._rehash, epoch)
        if i < len(self._rehash) and self._rehash[i] == epoch:
            return self.modulus(epoch - 1), self.modulus(epoch)
        return None

    # --- shedding: the keep-probability each record survived -------------------------------------

    @property
    def sheds(self) -> bool:
        """Whether the log folded so far ever set a keep-probability below 1 (if not, every record
        was kept with probability 1 and nothing needs looking up)."""
        return self._sheds

    def keep_at(self, epoch: int) -> dict[str, float]:
        """The ``SHEDDING`` settings in force at ``epoch`` (target -> keep-probability)."""
        self._check(epoch)
        i = bisect.bisect_right(self._keep_epochs, epoch) - 1
        return self._keeps[i][1] if i >= 0 else {}

    def keep_probabilities(self, topics: np.ndarray, epochs: np.ndarray) -> np.ndarray:
        """Per record: the probability its router kept it with, from its input topic and its
        envelope epoch (the router kept it under the settings of exactly that epoch: its topic's
        own, else ``*``, else 1.0; :func:`ballast.control.state.keep_for`).

        Answered per distinct (settings, topic) pair, so a batch costs a few numpy passes."""
        n = epochs.size
        if not n or not self._sheds:
            return np.ones(n, dtype=np.float64)
        self._check(int(epochs.max()))
        entry = np.searchsorted(np.asarray(self._keep_epochs), epochs, side="right") - 1
        codes, names = pd.factorize(topics, use_na_sentinel=False)  # a missing topic: "" (only `*`)
        width = max(len(names), 1)
        pairs, inverse = np.unique(entry * width + codes, return_inverse=True)
        probs = np.empty(pairs.size, dtype=np.float64)
        for j, pair in enumerate(pairs.tolist()):
            i, code = divmod(pair, width)
            settings = self._keeps[i][1] if i >= 0 else {}
            topic = names[code]
            probs[j] = keep_for(settings, topic if isinstance(topic, str) else "")
        return probs[inverse.reshape(-1)]

    def lowest_keep(self, topics: tuple[str, ...], first: int, last: int) -> float:
        """The lowest keep-probability in force for any of ``topics`` at any epoch in
        ``[first, last]`` (1.0: nothing of theirs was shed then)."""
        self._check(last)
        if not self._sheds:
            return 1.0
        lo = max(bisect.bisect_right(self._keep_epochs, first) - 1, 0)
        hi = bisect.bisect_right(self._keep_epochs, last)
        return min(
            (keep_for(settings, t) for _e, settings in self._keeps[lo:hi] for t in topics or ("",)),
            default=1.0,
        )

    def epoch_at_time(self, log_ms: int, upto: int) -> int:
        """The epoch in force at log time ``log_ms``: that of the last control event appended at
        or before it (the genesis when none was), among the epochs up to ``upto``.

        Why ``upto``: the caller's batch knows the log only to there, and a view folded further
        by now must not answer a replay differently. Never later than the truth (module
        docstring): without times, the first epoch folded."""
        self._check(upto)
        i = min(bisect.bisect_right(self._times, log_ms), bisect.bisect_right(self._timed_epochs, upto))
        return self._timed_epochs[i - 1] if i else self._first

    def last_epoch_at_time(self, log_ms: int, upto: int) -> int:
        """The latest epoch that may have been in force at log time ``log_ms``, among the epochs
        up to ``upto``: the one before the first event known to be appended after it. Never
        earlier than the truth (an event without a time may have come before ``log_ms``): without
        times, ``upto``. The upper end of a window's epochs, as :meth:`epoch_at_time` is the lower."""
        self._check(upto)
        i = bisect.bisect_right(self._times, log_ms)
        if i < len(self._timed_epochs) and self._timed_epochs[i] <= upto:
            return max(self._timed_epochs[i] - 1, self._first)
        return upto

    # --- questions about many keys at once (the batch path) -------------------------------------

    def owners(self, keys: np.ndarray, epochs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(owner, run start) of each (key, epoch) pair, vectorised over the keys the table never
        named (their owner is the hash at the epoch's modulus); named keys are answered one by one."""
        n = keys.size
        owner = np.empty(n, dtype=np.int64)
        start = np.zeros(n, dtype=np.int64)
        if not n:
            return owner, start
        self._check(int(epochs.max()))
        named = np.fromiter((k in self._pins for k in keys.tolist()), dtype=bool, count=n)
        plain = np.flatnonzero(~named)
        if plain.size:
            uniq, inverse = np.unique(keys[plain], return_inverse=True)
            hashes = murmur2_array([k.encode("utf-8") for k in uniq.tolist()])
            e = epochs[plain]
            moduli = np.array([self.modulus(int(x)) for x in np.unique(e)])
            _epochs, e_inv = np.unique(e, return_inverse=True)
            owner_plain = np.empty(plain.size, dtype=np.int64)
            for j, m in enumerate(moduli.tolist()):
                sel = e_inv == j
                owner_plain[sel] = kafka_partition_array(hashes, m)[inverse[sel]]
            owner[plain] = owner_plain
            if self._rehash:
                start[plain] = self._rehash_starts(hashes, inverse, e)
        for i in np.flatnonzero(named).tolist():
            k, ep = str(keys[i]), int(epochs[i])
            owner[i] = self.owner(k, ep)
            start[i] = self.run_start(k, ep)
        return owner, start

    def _rehash_starts(self, hashes: np.ndarray, inverse: np.ndarray, epochs: np.ndarray) -> np.ndarray:
        """Run start of unpinned keys: the last rehash epoch <= e that changed their home."""
        start = np.zeros(epochs.size, dtype=np.int64)
        for c in self._rehash:  # ascending: a later change overwrites an earlier one
            before = kafka_partition_array(hashes, self.modulus(c - 1))[inverse]
            after = kafka_partition_array(hashes, self.modulus(c))[inverse]
            start = np.where((epochs >= c) & (before != after), c, start)
        return start


class OwnershipLog:
    """An :class:`OwnershipView` kept up to date from the control topic (read from its genesis).

    Why from the genesis and not the latest snapshot: a worker may hold state from any epoch back
    (a key that moved long ago and never again), and its run start is only known from the move.
    """

    def __init__(self, kafka: Any, topic: str, routed_partitions: int) -> None:
        from ballast.control.log import ControlLogReader

        self.view = OwnershipView(routed_partitions)
        self._reader = ControlLogReader(kafka, topic, start_offset=0)
        self._latest_at = 0.0

    def ensure(self, epoch: int, timeout: float = 60.0) -> OwnershipView:
        """The view, folded at least to ``epoch`` (which the caller saw in its data, so it exists)."""
        deadline = time.monotonic() + timeout
        while self.view.epoch < epoch:
            if time.monotonic() > deadline:
                raise ControlLogError(
                    f"control log: epoch {epoch} was seen in the data but the log reached only "
                    f"{self.view.epoch} within {timeout:g} s"
                )
            for event, log_ms in self._reader.poll_timed(timeout=0.2):
                self.view.apply(event, log_ms)
        return self.view

    def latest(self, timeout: float = 60.0) -> OwnershipView:
        """The view folded to the control log's end as of now.

        Why the end and not only the epochs the data carries: a worker whose routed partition lags
        must not emit a window of a key the log already moves elsewhere (the new owner may hold
        records of that window, routed by a router that is ahead); see the engine's emission rule.
        """
        for event, log_ms in self._reader.read_to_end_timed(timeout):
            self.view.apply(event, log_ms)
        return self.view

    def close(self) -> None:
        self._reader.close()


_SHARED: dict[tuple[Any, str, int], OwnershipLog] = {}


def shared_log(kafka: Any, topic: str, routed_partitions: int) -> OwnershipLog:
    """One log follower per Python worker process and control topic (Spark reuses its workers)."""
    key = (kafka.connection, topic, routed_partitions)
    log = _SHARED.get(key)
    if log is None:
        log = _SHARED[key] = OwnershipLog(kafka, topic, routed_partitions)
    return log
