"""Partial Key Grouping (power of two choices) as a *simulation-only* reference.

PKG sends each record of key k to the less loaded of two candidate workers, so a key's state is
split across two workers and needs a downstream merge: valid only for mergeable aggregates
(counts, sums), never for joins or arbitrary state. Ballast does not route this way; the planner
exists so the benchmark can show what splitting keys would buy.

Model decisions (the PKG paper works per tuple; we work per interval):

* Choices: ``c1 = h(k)`` (Kafka's hash) and ``c2`` derived from ``toPositive(murmur2(k))`` by a
  64-bit multiplicative mix, forced to differ from ``c1`` when ``N > 1``.
* Records arrive interleaved, which we model as *fluid* water-filling: a key's cost is split
  between its two choices so as to equalise them (the limit of per-tuple greedy), processed in a
  seeded random key order, in small batches that see the loads at the batch start (like several
  sources with slightly stale load estimates), in ``passes`` passes of ``cost / passes`` each.
* No table and no migration; ``meta['split_keys']`` counts keys whose state lives on two workers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ballast.planner.heuristics import tolerance
from ballast.planner.interface import Plan, Timer, as_current
from ballast.planner.stats import KeyStats

_MIX = np.uint64(0x9E3779B97F4A7C15)


def second_choice(hash_raw: np.ndarray, first: np.ndarray, num_workers: int) -> np.ndarray:
    if num_workers == 1:
        return first.copy()
    mixed = (hash_raw.astype(np.uint64) * _MIX) >> np.uint64(33)
    step = 1 + (mixed % np.uint64(num_workers - 1)).astype(np.int64)
    return ((first.astype(np.int64) + step) % num_workers).astype(np.int32)


def pkg_loads(
    cost: np.ndarray,
    first: np.ndarray,
    second: np.ndarray,
    cold_load: np.ndarray,
    *,
    passes: int = 2,
    batch: int = 64,
    seed: int = 0,
) -> tuple[np.ndarray, int]:
    """Per-worker loads under fluid two-choice splitting, and the number of keys that got split."""
    n_workers = cold_load.shape[0]
    loads = cold_load.astype(float).copy()
    order = np.random.default_rng(seed).permutation(cost.size)
    share1 = np.zeros(cost.size)
    part = cost / passes
    for _ in range(passes):
        for start in range(0, order.size, batch):
            b = order[start : start + batch]
            c = part[b]
            l1 = loads[first[b]]
            l2 = loads[second[b]]
            x = np.clip((l2 - l1 + c) / 2.0, 0.0, c)
            share1[b] += x
            loads += np.bincount(first[b], weights=x, minlength=n_workers)
            loads += np.bincount(second[b], weights=c - x, minlength=n_workers)
    split = int(np.count_nonzero((share1 > 1e-12 * np.maximum(cost, 1)) & (share1 < cost * (1 - 1e-12))))
    return loads, split


@dataclass
class PKGPlanner:
    theta_max: float = 0.08
    passes: int = 2
    batch: int = 64  # keys per batch; grows to n // 2000 for big key sets (2000 steps per pass)
    name: str = "PKG"

    def realized_loads(self, stats: KeyStats, assign: np.ndarray) -> np.ndarray:
        """PKG ignores any assignment: loads come from splitting every key over its two choices."""
        return self._split(stats)[0]

    def _split(self, stats: KeyStats) -> tuple[np.ndarray, int]:
        if stats.hash_raw is None:
            raise ValueError("PKG needs hash_raw to derive its second choice")
        second = second_choice(stats.hash_raw, stats.home, stats.num_workers)
        return pkg_loads(
            stats.cost, stats.home, second, stats.cold_load, passes=self.passes,
            batch=max(self.batch, stats.n // 2000),
        )

    def plan(self, stats: KeyStats, current: np.ndarray | Mapping) -> Plan:
        cur = as_current(stats, current)
        with Timer() as t:
            loads, split = self._split(stats)
        cap = stats.cap(self.theta_max)
        return Plan(
            self.name, stats, cur, stats.home.copy(), loads, cap, t.elapsed,
            feasible=bool(loads.max() <= cap + tolerance(stats)),
            infeasible_keys=np.empty(0, dtype=np.int64),  # PKG splits keys: no key is too heavy
            table_size_override=0,
            meta={"split_keys": split, "simulation_only": True},
        )
