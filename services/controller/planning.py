"""From router load to a routing plan: one planning round of the controller.

Why heavy hitters only: the routers publish bounded sketches, not every key. The tracked keys are
the planner's movable keys; everything else follows the hash and counts as immovable ("cold")
load on its hash home, estimated as the worker's records minus its tracked keys' records (floored
at zero, since sketch counts are upper estimates). To make room for the hottest key the planner
must move medium keys too, and it can only move keys it sees: track generously.
"""

from __future__ import annotations

import numpy as np

from ballast.planner.interface import Plan
from ballast.planner.mixed import MixedPlanner
from ballast.planner.stats import KeyStats
from ballast.routing.table import RoutingTable
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
