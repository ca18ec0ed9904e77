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
  hands them back to the hash. The view records, per key, the epochs its pin changed.
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

**What is kept, and from where** (issue 27, defect 5: every worker used to fold the whole log from
its genesis, 5-6 k events per CPU-second and ~860 B per event, so a long log failed every fresh
task). The view keeps the *detail* (pin changes, moves, settings) only of the epochs after its
*floor*, and below it the small :class:`~ballast.control.history.History` the log's snapshots
carry: per key ever pinned the epoch its run began, the modulus changes, the lowest keep-probability
in force since any epoch. That answers every question about a run that is still in force at the
floor (a key pinned long ago, state held since) and about every epoch after the floor, exactly as a
fold from the genesis would. A question that needs detail below the floor (a record from a router
that lags further behind, a chunk of an old move, a worker whose frontier is behind) makes the view
fold that part again (its ``loader``: :class:`spark_jobs.reduce.ownership_log.OwnershipLog` reads
from the latest snapshot at or before the epoch); it never answers with less. :meth:`forget` raises
the floor again past detail no question needed for a while.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, KeysView, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from ballast.control.history import History, copy_floors, keep_for, lowest_since, note_keep
from ballast.control.state import StateBuilder, initial_state, snapshot_history
from ballast.routing.murmur2 import kafka_partition, kafka_partition_array, murmur2_array

Move = tuple[int, int]  # (from worker, to worker)
UNPINNED = -1


class EpochNotFolded(LookupError):
    """A question about an epoch the view has not folded yet (call ``ensure`` first)."""


class EpochForgotten(LookupError):
    """A question that needs the detail of an epoch below the view's floor, and no way to read it."""


def _body(event: Mapping[str, Any]) -> Mapping[str, Any]:
    payload = event["payload"]
    return payload[1] if isinstance(payload, tuple) else payload


class OwnershipView:
    """The routing history, folded event by event from a snapshot that carries the history (or the
    log's origin); ``loader(epoch)``: a view folded from at or before ``epoch`` to at least this
    one's epoch (None: a question below the floor raises :class:`EpochForgotten`)."""

    def __init__(
        self, routed_partitions: int, loader: Callable[[int], OwnershipView] | None = None
    ) -> None:
        self._builder = StateBuilder(initial_state(routed_partitions), history=True)
        self._loader = loader
        self._floor = 0  # detail is kept for the epochs after it
        self._at_origin = True  # the floor is the log's origin: nothing before it to forget
        self._pins: dict[str, list[tuple[int, int]]] = {}  # key -> [(floor, pin then), (epoch, pin)]
        self._base_runs: dict[str, int] = {}  # run start at the floor of the keys whose run changed since
        self._moves: dict[int, dict[str, Move]] = {}
        # [(epoch, the SHEDDING settings from then on)], from the floor, one entry per change
        self._keeps: list[tuple[int, dict[str, float]]] = []
        self._keep_epochs: list[int] = []
        self._floors: dict[str, list[list[Any]]] = {}  # keep floors as of the floor
        self._rehash: list[int] = []  # epochs at which the modulus changed (a copy of the history's)
        self._asked: int | None = None  # the lowest epoch a question needed since `_asked_from`
        self._asked_from = 0

    # --- folding ----------------------------------------------------------------------------------

    @property
    def epoch(self) -> int:
        """The last epoch folded (-1 before the first event)."""
        return self._builder.epoch if self._builder.started else -1

    @property
    def floor(self) -> int:
        """Detail is kept for the epochs after this one (see the module docstring)."""
        return self._floor

    @property
    def _history(self) -> History:
        history = self._builder.history
        assert history is not None, "the view has folded nothing yet"
        return history

    @property
    def moved_keys(self) -> KeysView[str]:
        """The keys the table ever pinned: a live view, O(1) per membership test."""
        history = self._builder.history
        return history.runs.keys() if history is not None else {}.keys()

    @property
    def rehash_epochs(self) -> Sequence[int]:
        return self._rehash

    def apply(self, event: Mapping[str, Any]) -> None:
        """Fold one event (in log order). The first event must be a snapshot that carries the
        history, or the log's origin."""
        builder = self._builder
        etype = event["type"]
        body = _body(event)
        before: dict[str, tuple[int, int, int | None]] = {}
        if builder.started:
            history = self._history
            if etype == "ROUTING_UPDATE":
                named = set(body.get("assign", {})) | set(body.get("unassign", []))
            elif etype in ("TABLE_SNAPSHOT", "SCALE"):
                named = {k.decode("utf-8") for k in builder.pinned()} | set(body.get("table", {}))
                if int(body["num_workers"]) != builder.num_workers:
                    named |= set(history.runs)  # their hash home may change
            else:
                named = set()
            for key in named:
                try:
                    kb = key.encode("utf-8")
                except UnicodeEncodeError:
                    continue  # the fold refuses the event
                pin = builder.pin(kb)
                before[key] = (builder.route(kb), UNPINNED if pin is None else pin, history.runs.get(key))
        n_before = builder.num_workers
        started = builder.started
        if not builder.apply(event):
            return
        epoch = builder.epoch
        if not started:
            self._start(epoch, event)
            return
        history = self._history
        if builder.num_workers != n_before:
            self._rehash = history.rehash_epochs
        if etype in ("SHEDDING", "TABLE_SNAPSHOT"):
            keep = builder.keep_probabilities()
            if keep != self._keeps[-1][1]:
                self._keeps.append((epoch, keep))
                self._keep_epochs.append(epoch)
        moves: dict[str, Move] = {}
        for key, (owner, pin, run) in before.items():
            kb = key.encode("utf-8")
            now = builder.pin(kb)
            now = UNPINNED if now is None else now
            if now != pin:
                self._pins.setdefault(key, [(self._floor, pin)]).append((epoch, now))
            if key not in self._base_runs and history.runs.get(key) != run:
                self._base_runs[key] = run if run is not None else history.default_run(kb, self._floor)
            new = builder.route(kb)
            if new != owner and builder.num_workers == n_before:
                moves[key] = (owner, new)
        if moves:
            self._moves[epoch] = moves

    def _start(self, epoch: int, event: Mapping[str, Any]) -> None:
        history = self._history
        self._floor = self._asked_from = epoch
        self._at_origin = snapshot_history(event) is None
        self._keeps = [(epoch, self._builder.keep_probabilities())]
        self._keep_epochs = [epoch]
        self._floors = copy_floors(history.floors)
        self._rehash = history.rehash_epochs

    def _check(self, epoch: int) -> None:
        if epoch > self.epoch:
            raise EpochNotFolded(f"epoch {epoch} is beyond the control log folded so far ({self.epoch})")

    def _need(self, epoch: int) -> None:
        """Questions need the detail from ``epoch`` on: read it again if the view forgot it."""
        if self._asked is None or epoch < self._asked:
            self._asked = epoch
        if epoch >= self._floor or self._at_origin:
            return
        if self._loader is None:
            raise EpochForgotten(
                f"epoch {epoch} is below the view's floor {self._floor} and nothing can read it"
            )
        other = self._loader(epoch)
        if other.epoch < self.epoch or not (other._floor <= epoch or other._at_origin):
            raise EpochForgotten(f"reading the control log again from epoch {epoch} failed")
        asked = self._asked
        for name, value in vars(other).items():
            if name != "_loader":
                setattr(self, name, value)
        self._asked = min(asked, self._asked) if self._asked is not None else asked

    # --- questions about one key -----------------------------------------------------------------

    def modulus(self, epoch: int) -> int:
        """The hash modulus (active workers) at ``epoch``."""
        self._check(epoch)
        return self._history.modulus(epoch)

    def _pin(self, key: str, epoch: int) -> int:
        detail = self._pins.get(key)
        if detail is None:  # unchanged since the floor
            pin = self._builder.pin(key.encode("utf-8"))
            return UNPINNED if pin is None else pin
        return detail[max(bisect.bisect_right(detail, (epoch, 1 << 62)) - 1, 0)][1]

    def _owner(self, key: str, epoch: int) -> int:
        pin = self._pin(key, epoch)
        return pin if pin != UNPINNED else kafka_partition(key.encode("utf-8"), self._history.modulus(epoch))

    def owner(self, key: str, epoch: int) -> int:
        """The worker routing sent ``key`` to under ``epoch``."""
        self._check(epoch)
        self._need(epoch)
        return self._owner(key, epoch)

    def _changes(self, key: str, after: int, upto: int) -> list[int]:
        """Epochs in ``(after, upto]`` at which ``key``'s owner may change: its pin changes and
        every rehash (detail: all after the floor)."""
        pins = [e for e, _ in self._pins.get(key, ()) if after < e <= upto]
        rehash = self._rehash
        if not rehash:
            return pins
        i, j = bisect.bisect_right(rehash, after), bisect.bisect_right(rehash, upto)
        return sorted(set(pins).union(rehash[i:j])) if i < j else pins

    def _run_at_floor(self, key: str) -> int:
        run = self._base_runs.get(key)
        if run is None:
            run = self._history.runs.get(key)
        return run if run is not None else self._history.default_run(key.encode("utf-8"), self._floor)

    def _run_start(self, key: str, epoch: int) -> int:
        for c in reversed(self._changes(key, self._floor, epoch)):
            if self._owner(key, c) != self._owner(key, c - 1):
                return c
        return self._run_at_floor(key)

    def run_start(self, key: str, epoch: int) -> int:
        """First epoch of the run of epochs (same owner, no interruption) that contains ``epoch``."""
        self._check(epoch)
        self._need(epoch)
        return self._run_start(key, epoch)

    def run_end(self, key: str, start: int, known: int) -> int | None:
        """The epoch at which the run starting at ``start`` ends, if that is known by ``known``."""
        self._check(known)
        after = start
        if start < self._floor and not self._at_origin:
            if start == self._run_at_floor(key):  # still in force at the floor: ends after it
                after = self._floor
                self._need(self._floor)
            else:
                self._need(start)  # ended at or before the floor: read that part again
        else:
            self._need(max(start, self._floor))
        for c in self._changes(key, after, known):
            if self._owner(key, c) != self._owner(key, c - 1):
                return c
        return None

    def moves_at(self, epoch: int) -> Mapping[str, Move]:
        """The table moves of ``epoch``: each key with its (old owner, new owner)."""
        self._check(epoch)
        if epoch <= self._floor and not self._at_origin:
            self._need(epoch - 1)  # the floor's own moves are known only from before it
        else:
            self._need(max(epoch, self._floor))
        return self._moves.get(epoch, {}) if epoch > self._floor else {}

    def rehash_at(self, epoch: int) -> tuple[int, int] | None:
        """(modulus before, modulus after) when ``epoch`` changed the hash modulus, else None."""
        self._check(epoch)
        i = bisect.bisect_left(self._rehash, epoch)
        if i < len(self._rehash) and self._rehash[i] == epoch:
            history = self._history
            return history.modulus(epoch - 1), history.modulus(epoch)
        return None

    # --- shedding: the keep-probability each record survived -------------------------------------

    @property
    def sheds(self) -> bool:
        """Whether the log folded so far ever set a keep-probability below 1 (if not, every record
        was kept with probability 1 and nothing needs looking up)."""
        history = self._builder.history
        return history is not None and history.sheds()

    def keep_at(self, epoch: int) -> dict[str, float]:
        """The ``SHEDDING`` settings in force at ``epoch`` (target -> keep-probability)."""
        self._check(epoch)
        self._need(epoch)
        i = bisect.bisect_right(self._keep_epochs, epoch) - 1
        return self._keeps[i][1] if i >= 0 else {}

    def keep_probabilities(self, topics: np.ndarray, epochs: np.ndarray) -> np.ndarray:
        """Per record: the probability its router kept it with, from its input topic and its
        envelope epoch (the router kept it under the settings of exactly that epoch: its topic's
        own, else ``*``, else 1.0; :func:`ballast.control.state.keep_for`).

        Answered per distinct (settings, topic) pair, so a batch costs a few numpy passes."""
        n = epochs.size
        if not n or not self.sheds:
            return np.ones(n, dtype=np.float64)
        self._check(int(epochs.max()))
        self._need(int(epochs.min()))
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
        if not self.sheds:
            return 1.0
        targets = topics or ("",)
        self._need(min(last, max(first, self._floor)))
        low = 1.0
        if first < self._floor and not self._at_origin:  # before the floor: the history's floors
            low = min(lowest_since(self._floors, t, first) for t in targets)
            first = self._floor
        lo = max(bisect.bisect_right(self._keep_epochs, first) - 1, 0)
        hi = bisect.bisect_right(self._keep_epochs, last)
        return min(low, min((keep_for(s, t) for _e, s in self._keeps[lo:hi] for t in targets), default=1.0))

    def owners(self, keys: np.ndarray, epochs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(owner, run start) of each (key, epoch) pair, vectorised over the keys the table never
        pinned (their owner is the hash at the epoch's modulus); pinned ones are answered one by one."""
        n = keys.size
        owner = np.empty(n, dtype=np.int64)
        start = np.zeros(n, dtype=np.int64)
        if not n:
            return owner, start
        self._check(int(epochs.max()))
        self._need(int(epochs.min()))
        history = self._history
        runs = history.runs
        named = np.fromiter((k in runs for k in keys.tolist()), dtype=bool, count=n)
        plain = np.flatnonzero(~named)
        if plain.size:
            uniq, inverse = np.unique(keys[plain], return_inverse=True)
            hashes = murmur2_array([k.encode("utf-8") for k in uniq.tolist()])
            e = epochs[plain]
            moduli = np.array([history.modulus(int(x)) for x in np.unique(e)])
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
            owner[i] = self._owner(k, ep)
            start[i] = self._run_start(k, ep)
        return owner, start

    def _rehash_starts(self, hashes: np.ndarray, inverse: np.ndarray, epochs: np.ndarray) -> np.ndarray:
        """Run start of keys never pinned: the last rehash epoch <= e that changed their home."""
        history = self._history
        start = np.zeros(epochs.size, dtype=np.int64)
        for c in self._rehash:  # ascending: a later change overwrites an earlier one
            before = kafka_partition_array(hashes, history.modulus(c - 1))[inverse]
            after = kafka_partition_array(hashes, history.modulus(c))[inverse]
            start = np.where((epochs >= c) & (before != after), c, start)
        return start

    # --- forgetting --------------------------------------------------------------------------------

    def forget(self, retain: int) -> bool:
        """Raise the floor when the detail spans at least ``2 * retain`` epochs: to ``retain``
        epochs below the last one folded, or to the lowest epoch a question needed since the last
        time (questions over at least ``retain`` epochs of the log are watched before the floor
        moves past what they needed). True when it moved."""
        epoch = self.epoch
        if epoch - self._floor < 2 * retain or epoch - self._asked_from < retain:
            return False
        target = epoch - retain if self._asked is None else min(epoch - retain, self._asked)
        self._asked, self._asked_from = None, epoch
        if target <= self._floor:
            return False
        self.compact(target)
        return True

    def compact(self, floor: int) -> None:
        """Keep the detail of the epochs after ``floor`` only (answers about later epochs are
        unchanged; earlier ones need the loader)."""
        floor = min(floor, self.epoch)
        if floor <= self._floor:
            return
        history = self._history
        pins: dict[str, list[tuple[int, int]]] = {}
        base: dict[str, int] = {}
        for key in set(self._pins) | set(self._base_runs):
            later = [(e, p) for e, p in self._pins.get(key, ()) if e > floor]
            if later:
                pins[key] = [(floor, self._pin(key, floor)), *later]
            run = self._run_start(key, floor)
            if run != history.runs.get(key):
                base[key] = run
        for e, settings in self._keeps[1:]:
            if e <= floor:
                note_keep(self._floors, e, settings)
        i = bisect.bisect_right(self._keep_epochs, floor) - 1
        self._keeps = [(floor, self._keeps[i][1]), *self._keeps[i + 1 :]]
        self._keep_epochs = [e for e, _s in self._keeps]
        self._moves = {e: m for e, m in self._moves.items() if e > floor}
        self._pins, self._base_runs = pins, base
        self._floor = floor
        self._at_origin = False
