"""From router load to a routing update: the controller's one planning round.

Why heavy hitters only: the routers publish bounded sketches, not every key. The tracked keys are
the planner's movable keys; everything else follows the hash and counts as immovable ("cold")
load on its hash home, estimated as the worker's records minus its tracked keys' records (floored
at zero, since sketch counts are upper estimates). To make room for the hottest key the planner
must move medium keys too, and it can only move keys it sees: track generously.

Why a round returns a *diff*: the control log's ``ROUTING_UPDATE`` carries the entries that change
(assigned to a new worker, or handed back to the hash), so a plan that keeps most of the table
moves, and logs, only what changes. :func:`planning_round` is the one place that computes it; the
controller's command, the demo and the benchmarks all go through it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ballast.control.state import ControlState
from ballast.planner.interface import Plan
from ballast.planner.mixed import MixedPlanner
from ballast.planner.stats import KeyStats
from ballast.routing.murmur2 import kafka_partition
from ballast.routing.table import RoutingTable
from services.controller.interval_load import IntervalLoad
from services.controller.router_load import RouterLoad


def plan_from_load(load: RouterLoad, workers: int, theta: float, current: RoutingTable | None = None) -> Plan:
    """A Mixed plan over the heavy hitters of ``load`` (current table: ``current``, else hash only)."""
    keys = list(load.heavy_hitters)
    cost = np.array([load.heavy_hitters[k] for k in keys], dtype=np.float64)
    probe = KeyStats.from_bytes_keys(keys, cost, cost.copy(), workers)
    table = {k: w for k, w in (current or {}).items() if k in probe.index}
    tracked_per_worker = np.bincount(probe.current_from_table(table), weights=cost, minlength=workers)
    cold = np.maximum(load.per_worker - tracked_per_worker, 0.0)
    stats = KeyStats.from_bytes_keys(keys, cost, cost.copy(), workers, cold_load=cold, cold_mem=cold)
    return MixedPlanner(theta_max=theta).plan(stats, table)


def plan_table(plan: Plan, epoch: int = 0) -> RoutingTable:
    """The plan's routing table ``A'`` (bytes keys, deviations from the hash only)."""
    return RoutingTable(plan.stats.num_workers, plan.table, epoch)


@dataclass(frozen=True)
class RoundResult:
    """What one planning round decided, against the table in force."""

    plan: Plan
    table: dict[str, int]  # the new table (key -> worker), deviations from the hash only
    assign: dict[str, int]  # entries to set: new keys and keys that change worker
    unassign: tuple[str, ...]  # keys of the old table the plan hands back to the hash
    plan_ms: float

    @property
    def changes(self) -> bool:
        return bool(self.assign or self.unassign)

    @property
    def predicted_max_mean(self) -> float:
        loads = self.plan.predicted_loads
        return float(loads.max() / loads.mean()) if loads.mean() else 1.0

    def moves(self, workers: int) -> dict[str, tuple[int, int]]:
        """Each assigned key's (hash home, new worker): the keys whose state a reduce must move
        (unless it moves between two table workers; the new worker is what counts)."""
        return {k: (kafka_partition(k.encode(), workers), w) for k, w in self.assign.items()}


def planning_round(load: RouterLoad, state: ControlState, theta: float) -> RoundResult:
    """Plan from ``load`` against ``state``'s table and hash modulus; the diff to send."""
    started = time.perf_counter()
    workers = state.num_workers
    current = state.table if len(state.table) else None
    plan = plan_from_load(load, workers, theta, current)
    return _diff(plan, state, started)


def plan_interval(
    load: IntervalLoad,
    cost: np.ndarray,
    state: ControlState,
    theta: float,
    mem: np.ndarray | None = None,
) -> RoundResult:
    """The controller loop's round: a Mixed plan over ``load``'s tracked keys priced at ``cost``
    (the forecast of their load next interval, or the last interval's), the untracked load as
    each worker's immovable remainder, against ``state``'s table; the diff to send.

    Pinned keys that are no longer tracked (they cooled down below the heavy hitters) are not in
    the planner's view, so the plan hands them back to the hash: a pin only earns its state move
    while the key is heavy."""
    started = time.perf_counter()
    workers = state.num_workers
    keys = list(load.keys)
    cost = np.asarray(cost, dtype=np.float64)
    stats = KeyStats.from_bytes_keys(
        keys, cost, cost.copy() if mem is None else mem, workers,
        cold_load=load.remainder[:workers], cold_mem=np.zeros(workers),
    )  # fmt: skip
    table = {k: w for k, w in state.table.items() if k in stats.index}
    plan = MixedPlanner(theta_max=theta).plan(stats, table)
    return _diff(plan, state, started)


def _diff(plan: Plan, state: ControlState, started: float) -> RoundResult:
    new = {k.decode(): int(w) for k, w in plan_table(plan).items()}
    old = {k.decode(): int(w) for k, w in state.table.items()}
    assign = {k: w for k, w in new.items() if old.get(k) != w}
    unassign = tuple(sorted(k for k in old if k not in new))
    return RoundResult(plan, new, assign, unassign, (time.perf_counter() - started) * 1000)
