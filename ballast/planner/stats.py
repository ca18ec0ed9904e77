"""Compact per-interval statistics the planners consume.

Everything per key is a numpy array indexed by a dense *key index* ``0..n-1``; key identities
(bytes for the real system, ints in the simulator) live only in ``keys`` and are touched when a
plan is materialised into a routing table. That is the whole trick for K = 10**6: no per-key
Python objects in the hot parts, so sorting, grouping and load sums are single numpy calls.

Keys outside the tracked heavy hitters are folded into a per-worker ``cold_load`` / ``cold_mem``:
they are never in the routing table, so they always follow ``h`` and are immovable load.
Every key currently in the table must be tracked (otherwise the planner could not keep or move
it); :meth:`KeyStats.compact` enforces that when it shrinks a full statistics set.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from ballast.routing.murmur2 import kafka_partition_array, murmur2_array


@dataclass(frozen=True, eq=False)
class KeyStats:
    """One planning instant: tracked keys' cost ``c_k``, window memory ``M_k``, hash home ``h(k)``.

    ``cost`` may be records or measured processing time; the planners only add it up.
    ``mem`` is the window memory ``M_k(t, w)``: what moving the key costs.
    ``hash_raw`` (``toPositive(murmur2(k))``) is optional and only needed by slot-based planners
    (AutoFlow derives ``slot = hash_raw % S``; with ``N | S`` the slot's default owner is ``h(k)``).
    """

    keys: Sequence
    cost: np.ndarray
    mem: np.ndarray
    home: np.ndarray
    num_workers: int
    cold_load: np.ndarray = field(default=None)  # type: ignore[assignment]
    cold_mem: np.ndarray = field(default=None)  # type: ignore[assignment]
    hash_raw: np.ndarray | None = None

    def __post_init__(self) -> None:
        n = len(self.keys)
        nw = self.num_workers
        object.__setattr__(self, "cost", np.ascontiguousarray(self.cost, dtype=np.float64))
        object.__setattr__(self, "mem", np.ascontiguousarray(self.mem, dtype=np.float64))
        object.__setattr__(self, "home", np.ascontiguousarray(self.home, dtype=np.int32))
        cold_load = np.zeros(nw) if self.cold_load is None else np.asarray(self.cold_load, dtype=np.float64)
        cold_mem = np.zeros(nw) if self.cold_mem is None else np.asarray(self.cold_mem, dtype=np.float64)
        object.__setattr__(self, "cold_load", cold_load)
        object.__setattr__(self, "cold_mem", cold_mem)
        if not (len(self.cost) == len(self.mem) == len(self.home) == n):
            raise ValueError("keys, cost, mem and home must have the same length")
        if cold_load.shape != (nw,) or cold_mem.shape != (nw,):
            raise ValueError("cold_load/cold_mem must have one entry per worker")
        if n and (self.home.min() < 0 or self.home.max() >= nw):
            raise ValueError("home worker out of range")
        if n and (self.cost.min() < 0 or self.mem.min() < 0):
            raise ValueError("cost and mem must be non-negative")

    # -- construction ----------------------------------------------------------------------------
    @classmethod
    def from_bytes_keys(
        cls,
        keys: Sequence[bytes],
        cost: np.ndarray,
        mem: np.ndarray,
        num_workers: int,
        cold_load: np.ndarray | None = None,
        cold_mem: np.ndarray | None = None,
    ) -> KeyStats:
        """Stats for real (bytes) keys; ``h`` is Kafka's partitioner, computed vectorised."""
        raw = murmur2_array(keys)
        home = kafka_partition_array(raw, num_workers)
        return cls(list(keys), cost, mem, home, num_workers, cold_load, cold_mem, raw)

    @property
    def n(self) -> int:
        return len(self.cost)

    @cached_property
    def index(self) -> dict:
        """key -> key index; built only when a dict table has to be translated."""
        return {k: i for i, k in enumerate(self.keys)}

    def current_from_table(self, table: Mapping) -> np.ndarray:
        """``F(k)`` for every tracked key under ``table`` (keys missing from the table hash home)."""
        current = self.home.copy()
        index = self.index
        for key, worker in table.items():
            i = index.get(key)
            if i is None:
                raise ValueError(f"table key {key!r} is not tracked; table keys must be in the statistics")
            if not 0 <= int(worker) < self.num_workers:
                raise ValueError(f"worker {worker} out of range")
            current[i] = int(worker)
        return current

    # -- derived quantities ------------------------------------------------------------------------
    def loads(self, assign: np.ndarray) -> np.ndarray:
        """Per-worker load ``L_d`` under the per-key assignment ``assign`` (cold load included)."""
        return np.bincount(assign, weights=self.cost, minlength=self.num_workers) + self.cold_load

    @property
    def total_load(self) -> float:
        return float(self.cost.sum() + self.cold_load.sum())

    @property
    def mean_load(self) -> float:
        return self.total_load / self.num_workers

    def cap(self, theta_max: float) -> float:
        """Load cap ``(1 + theta_max) * mean``; the mean is invariant under any re-routing."""
        return (1.0 + theta_max) * self.mean_load

    @property
    def total_mem(self) -> float:
        return float(self.mem.sum() + self.cold_mem.sum())

    def compact(self, current: np.ndarray, top_n: int) -> tuple[KeyStats, np.ndarray, np.ndarray]:
        """Keep the ``top_n`` heaviest keys plus every table key; fold the rest into cold load.

        Returns ``(stats, current, kept)`` where ``kept`` maps new key indices to old ones.
        Folded keys sit on ``h(k)`` (they are not in the table) and stay there.
        """
        if top_n >= self.n:
            return self, current, np.arange(self.n)
        in_table = current != self.home
        heavy = np.zeros(self.n, dtype=bool)
        heavy[np.argpartition(-self.cost, top_n - 1)[:top_n]] = True
        kept = np.flatnonzero(heavy | in_table)
        cold = np.ones(self.n, dtype=bool)
        cold[kept] = False
        nw = self.num_workers
        cold_load = self.cold_load + np.bincount(self.home[cold], weights=self.cost[cold], minlength=nw)
        cold_mem = self.cold_mem + np.bincount(self.home[cold], weights=self.mem[cold], minlength=nw)
        keys = self.keys[kept] if isinstance(self.keys, np.ndarray) else [self.keys[i] for i in kept]
        sub = KeyStats(
            keys,
            self.cost[kept],
            self.mem[kept],
            self.home[kept],
            nw,
            cold_load,
            cold_mem,
            None if self.hash_raw is None else self.hash_raw[kept],
        )
        return sub, current[kept], kept


def imbalance(loads: np.ndarray) -> float:
    """``max_d L_d / mean L`` (1.0 = perfect); 1.0 for an idle system."""
    mean = float(np.mean(loads))
    return float(np.max(loads)) / mean if mean > 0 else 1.0


def max_min_ratio(loads: np.ndarray) -> float:
    """``max_d L_d / min_d L_d`` (the paper's Fig. 7 measure); ``inf`` when a worker is idle."""
    lo = float(np.min(loads))
    hi = float(np.max(loads))
    if hi == 0:
        return 1.0
    return hi / lo if lo > 0 else float("inf")


class WindowMemory:
    """Window memory ``M_k(t, w) = sum of S_k over the last w intervals``, as a running sum.

    A ring of ``w`` per-interval state arrays; pushing interval t drops interval t - w, matching
    the paper's "each instance drops the state of interval t - w after finishing interval t".
    """

    def __init__(self, num_keys: int, window: int):
        if window < 1:
            raise ValueError("window must be >= 1")
        self.window = window
        self._ring = np.zeros((window, num_keys))
        self._total = np.zeros(num_keys)
        self._pos = 0

    def push(self, state: np.ndarray) -> np.ndarray:
        """Record one interval's per-key state size; returns the current window memory."""
        self._total -= self._ring[self._pos]
        self._ring[self._pos] = state
        self._total += state
        self._pos = (self._pos + 1) % self.window
        np.maximum(self._total, 0.0, out=self._total)  # cancel float drift below zero
        return self._total.copy()
