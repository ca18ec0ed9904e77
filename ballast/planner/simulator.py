"""Deterministic interval simulator: run one planner over a workload and charge it for migration.

Timeline of interval t (what a controller would see):

1. the workload produces per-key costs ``c(t)``; state ``S(t)`` enters the window memory;
2. the routing in force (decided at the end of t-1) processes them: *realized* loads;
3. if ``max/mean > 1 + theta_max`` (the paper's trigger) the planner runs on the stats of t;
   the moved keys' window memory ``M_k(t, w)`` is charged as migration; the *planned* loads
   (the plan's loads on interval t, recomputed by routing every key, not taken from the planner)
   are what the balance guarantee is about;
4. the new routing is used for interval t+1.

Determinism: workloads are seeded; planners are pure; nothing depends on wall-clock except the
reported plan time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ballast.planner.interface import Planner
from ballast.planner.stats import KeyStats, WindowMemory, imbalance, max_min_ratio
from ballast.routing.murmur2 import kafka_partition_array


@dataclass
class SimConfig:
    num_workers: int = 20
    theta_max: float = 0.08
    a_max: int = 3000
    beta: float = 1.5
    window: int = 1
    intervals: int = 50
    trigger: bool = True
    track_top: int | None = None  # compact stats: top-n heavy hitters + table keys, rest aggregated


@dataclass
class SimResult:
    planner: str
    config: SimConfig
    realized_imbalance: np.ndarray
    realized_maxmin: np.ndarray
    planned_imbalance: np.ndarray
    table_size: np.ndarray
    migration_fraction: np.ndarray
    plan_time_s: np.ndarray
    triggered: np.ndarray
    feasible: np.ndarray
    hot_key_infeasible: np.ndarray
    table_overflow: np.ndarray
    iterations: np.ndarray
    meta: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, float]:
        trig = self.triggered
        pt = self.plan_time_s[trig]
        return {
            "realized_maxmean_mean": float(np.mean(self.realized_imbalance)),
            "realized_maxmean_max": float(np.max(self.realized_imbalance)),
            "realized_maxmin_mean": float(np.mean(self.realized_maxmin)),
            "realized_maxmin_max": float(np.max(self.realized_maxmin)),
            "planned_maxmean_mean": float(np.mean(self.planned_imbalance)),
            "planned_maxmean_max": float(np.max(self.planned_imbalance)),
            "table_size_mean": float(np.mean(self.table_size)),
            "table_size_max": float(np.max(self.table_size)),
            "migration_pct_mean": 100.0 * float(np.mean(self.migration_fraction)),
            "migration_pct_max": 100.0 * float(np.max(self.migration_fraction)),
            "plan_time_ms_mean": 1e3 * float(pt.mean()) if pt.size else 0.0,
            "plan_time_ms_max": 1e3 * float(pt.max()) if pt.size else 0.0,
            "plans": int(trig.sum()),
            "infeasible_plans": int((trig & ~self.feasible).sum()),
            "hot_key_infeasible_plans": int((trig & self.hot_key_infeasible).sum()),
            "table_overflow_plans": int((trig & self.table_overflow).sum()),
            "iterations_max": int(self.iterations.max()) if self.iterations.size else 0,
        }


def simulate(workload, planner: Planner, config: SimConfig) -> SimResult:
    """Run ``planner`` over ``config.intervals`` intervals of ``workload``."""
    nw = config.num_workers
    k = len(workload.keys)
    home = kafka_partition_array(workload.hash_raw, nw)
    ids = np.arange(k)
    assign = home.copy()
    window = WindowMemory(k, config.window)
    realized_loads = getattr(planner, "realized_loads", None)
    t_count = config.intervals
    out = {name: np.zeros(t_count) for name in
           ("real", "maxmin", "planned", "table", "mig", "time", "iters")}
    flags = {name: np.zeros(t_count, dtype=bool) for name in ("trig", "feas", "hot", "over")}
    flags["feas"][:] = True
    table_size = 0
    for t, cost in enumerate(workload.intervals(t_count)):
        mem = window.push(workload.state(cost))
        stats = KeyStats(ids, cost, mem, home, nw, hash_raw=workload.hash_raw)
        loads = realized_loads(stats, assign) if realized_loads else stats.loads(assign)
        out["real"][t] = imbalance(loads)
        out["maxmin"][t] = max_min_ratio(loads)
        planned = out["real"][t]
        if not config.trigger or out["real"][t] > 1.0 + config.theta_max + 1e-12:
            if config.track_top is not None:
                sub, sub_cur, kept = stats.compact(assign, config.track_top)
                plan = planner.plan(sub, sub_cur)
                new_assign = assign.copy()
                new_assign[kept] = plan.assign
            else:
                plan = planner.plan(stats, assign)
                new_assign = plan.assign
            moved = new_assign != assign
            out["mig"][t] = float(mem[moved].sum()) / max(float(mem.sum()), 1e-300)
            new_loads = realized_loads(stats, new_assign) if realized_loads else stats.loads(new_assign)
            planned = imbalance(new_loads)
            out["time"][t] = plan.plan_time_s
            out["iters"][t] = plan.iterations
            flags["trig"][t] = True
            flags["feas"][t] = plan.feasible
            flags["hot"][t] = plan.infeasible_keys.size > 0
            flags["over"][t] = plan.table_overflow
            table_size = plan.table_size
            assign = new_assign
        out["planned"][t] = planned
        out["table"][t] = table_size
    return SimResult(
        planner=planner.name,
        config=config,
        realized_imbalance=out["real"],
        realized_maxmin=out["maxmin"],
        planned_imbalance=out["planned"],
        table_size=out["table"],
        migration_fraction=out["mig"],
        plan_time_s=out["time"],
        triggered=flags["trig"],
        feasible=flags["feas"],
        hot_key_infeasible=flags["hot"],
        table_overflow=flags["over"],
        iterations=out["iters"].astype(int),
        meta={"workload": getattr(workload, "name", type(workload).__name__)},
    )


PLANNER_NAMES = ("Hash", "Simple", "LLFD", "MinTable", "MinMig", "Mixed", "AutoFlow", "PKG")


def make_planner(name: str, config: SimConfig) -> Planner:
    """Build a planner by name with the simulation's theta_max / A_max / beta."""
    from ballast.planner.autoflow import AutoFlowPlanner
    from ballast.planner.baselines import HashOnlyPlanner, SimplePlanner
    from ballast.planner.heuristics import LLFDPlanner, MinMigPlanner, MinTablePlanner
    from ballast.planner.mixed import MixedPlanner
    from ballast.planner.pkg import PKGPlanner

    th = config.theta_max
    factories = {
        "Hash": lambda: HashOnlyPlanner(th),
        "Simple": lambda: SimplePlanner(th),
        "LLFD": lambda: LLFDPlanner(th),
        "MinTable": lambda: MinTablePlanner(th, a_max=config.a_max),
        "MinMig": lambda: MinMigPlanner(th, config.beta, a_max=config.a_max),
        "Mixed": lambda: MixedPlanner(th, config.a_max, config.beta),
        "AutoFlow": lambda: AutoFlowPlanner(th),
        "PKG": lambda: PKGPlanner(th),
    }
    if name not in factories:
        raise ValueError(f"unknown planner {name!r}; choose from {PLANNER_NAMES}")
    return factories[name]()
