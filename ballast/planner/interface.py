"""The one planner interface: statistics + current assignment -> :class:`Plan`.

Planners are pure: they read a :class:`~ballast.planner.stats.KeyStats` and the current per-key
assignment ``F`` (an int array, or a routing-table mapping translated by the stats) and return a
new assignment ``F'``. Nothing moves until the controller executes the plan.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from ballast.planner.stats import KeyStats


@dataclass(eq=False)
class Plan:
    """A rebalance plan over the tracked keys of ``stats``.

    ``assign`` is ``F'`` per key index; ``moves`` are the key indices whose owner changes
    (``Δ(F, F')``); ``predicted_loads`` are the loads of the planning interval under ``F'``.
    ``feasible`` is False when the balance cap could not be met; ``infeasible_keys`` then lists
    keys that alone exceed the cap (no planner that keeps keys whole can fix those), and
    ``table_overflow`` flags a table larger than ``A_max``.
    """

    planner: str
    stats: KeyStats
    current: np.ndarray
    assign: np.ndarray
    predicted_loads: np.ndarray
    cap: float
    plan_time_s: float = 0.0
    feasible: bool = True
    infeasible_keys: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    table_overflow: bool = False
    iterations: int = 1
    table_size_override: int | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def moves(self) -> np.ndarray:
        return np.flatnonzero(self.assign != self.current)

    @property
    def key_entries(self) -> int:
        """``|A'|`` as key entries: tracked keys routed away from ``h(k)``."""
        return int(np.count_nonzero(self.assign != self.stats.home))

    @property
    def table_size(self) -> int:
        """Routing-table size in the planner's own unit (key entries; slot entries for AutoFlow)."""
        return self.key_entries if self.table_size_override is None else self.table_size_override

    @property
    def migration_cost(self) -> float:
        """``MC = sum of M_k over moved keys`` (all w intervals of their state move)."""
        return float(self.stats.mem[self.moves].sum())

    @property
    def migration_fraction(self) -> float:
        """MC as a fraction of all state held (tracked + cold)."""
        total = self.stats.total_mem
        return self.migration_cost / total if total > 0 else 0.0

    @property
    def table(self) -> dict:
        """``A'`` as ``{key: worker}`` for keys off their hash home (built on demand)."""
        idx = np.flatnonzero(self.assign != self.stats.home)
        keys = self.stats.keys
        return {keys[i]: int(self.assign[i]) for i in idx}

    @property
    def moved_keys(self) -> dict:
        """``{key: (old_worker, new_worker)}`` for the migration set."""
        keys = self.stats.keys
        return {keys[i]: (int(self.current[i]), int(self.assign[i])) for i in self.moves}


class Planner(Protocol):
    name: str

    def plan(self, stats: KeyStats, current: np.ndarray | Mapping) -> Plan: ...


def as_current(stats: KeyStats, current: np.ndarray | Mapping) -> np.ndarray:
    """Normalise the current routing (array of owners, or a key->worker table) to an owner array."""
    if isinstance(current, np.ndarray):
        if current.shape != (stats.n,):
            raise ValueError("current must have one owner per tracked key")
        arr = current.astype(np.int32, copy=True)
        if stats.n and (arr.min() < 0 or arr.max() >= stats.num_workers):
            raise ValueError("current owner out of range")
        return arr
    return stats.current_from_table(current)


class Timer:
    """Wall-clock plan time (perf_counter), so every planner reports it the same way."""

    def __enter__(self) -> Timer:
        self.start = time.perf_counter()
        self.elapsed = 0.0
        return self

    def __exit__(self, *exc: object) -> None:
        self.elapsed = time.perf_counter() - self.start
