"""Reference planners with no table discipline: hash-only (plain Kafka) and Simple (LPT).

Simple (the paper's Alg. 5) is also Mixed's balance safety net: on any instance where LPT meets
the cap, Mixed must too (Theorem 4), so Mixed falls back to it when its own trials do not.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from ballast.planner.heuristics import heavy_keys, tolerance
from ballast.planner.interface import Plan, Timer, as_current
from ballast.planner.stats import KeyStats


def lpt_assign(stats: KeyStats) -> tuple[np.ndarray, np.ndarray]:
    """Longest Processing Time first over all tracked keys; cold load is preloaded and immovable.

    Zero-cost keys stay on ``h(k)``: placing them anywhere else changes no load and only adds
    table entries. Ties between equally loaded workers go to the lower id (heap order).
    """
    assign = stats.home.copy()
    loads = stats.cold_load.astype(float).copy()
    order = np.argsort(-stats.cost, kind="stable")
    order = order[stats.cost[order] > 0]
    heap = [(float(loads[d]), d) for d in range(stats.num_workers)]
    heapq.heapify(heap)
    costs = stats.cost[order].tolist()
    dest = np.empty(order.size, dtype=np.int32)
    replace = heapq.heapreplace
    for i, c in enumerate(costs):
        load, d = heap[0]
        dest[i] = d
        replace(heap, (load + c, d))
    assign[order] = dest
    return assign, stats.loads(assign)


def whole_plan(
    name: str,
    theta_max: float,
    stats: KeyStats,
    current: np.ndarray | Mapping,
    build: Callable[[], tuple[np.ndarray, np.ndarray | None]],
) -> Plan:
    """A plan that assigns every key afresh (``build`` -> assignment and, if it has them, loads)."""
    cur = as_current(stats, current)
    with Timer() as t:
        assign, loads = build()
        if loads is None:
            loads = stats.loads(assign)
    cap = stats.cap(theta_max)
    return Plan(name, stats, cur, assign, loads, cap, t.elapsed,
                feasible=bool(loads.max() <= cap + tolerance(stats)),
                infeasible_keys=heavy_keys(stats, cap))


@dataclass
class HashOnlyPlanner:
    """Plain Kafka keyed partitioning: every key on ``h(k)``, never rebalances."""

    theta_max: float = 0.08
    name: str = "Hash"

    def plan(self, stats: KeyStats, current: np.ndarray | Mapping) -> Plan:
        return whole_plan(self.name, self.theta_max, stats, current, lambda: (stats.home.copy(), None))


@dataclass
class SimplePlanner:
    """Simple (Alg. 5): rebuild from scratch with LPT over all keys. Ignores migration and table size."""

    theta_max: float = 0.08
    name: str = "Simple"

    def plan(self, stats: KeyStats, current: np.ndarray | Mapping) -> Plan:
        return whole_plan(self.name, self.theta_max, stats, current, lambda: lpt_assign(stats))
