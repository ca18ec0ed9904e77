"""The paper's single-shot heuristics built on LLFD: plain LLFD, MinTable (Alg. 2), MinMig (Alg. 3).

They differ only in Phase I (what to move back to ``h``) and in criterion R:

==========  ===========================  =====================================
planner     Phase I (cleaning)           R (Phases II and III)
==========  ===========================  =====================================
LLFD        none                         highest cost first
MinTable    move back every table key    highest cost first
MinMig      none                         highest ``gamma = c**beta / M`` first
==========  ===========================  =====================================

LLFD and MinMig do not bound the table; the paper leaves them out of its experiments for that
reason, we keep them as references.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ballast.planner.interface import Plan, Timer, as_current
from ballast.planner.llfd import PhaseResult, migration_priority, r_order, rebalance
from ballast.planner.stats import KeyStats

TOL_REL = 1e-9


def tolerance(stats: KeyStats) -> float:
    return TOL_REL * max(stats.total_load, 1.0)


def run_trial(
    stats: KeyStats, current: np.ndarray, clean: np.ndarray, order: np.ndarray, cap: float
) -> PhaseResult:
    """Phase I (move ``clean`` back to ``h``) then Phases II and III."""
    working = current.copy()
    working[clean] = stats.home[clean]
    return rebalance(stats.cost, stats.home, current, working, order, stats.cold_load, cap, tolerance(stats))


def heavy_keys(stats: KeyStats, cap: float) -> np.ndarray:
    """Keys that alone exceed the cap: no whole-key plan can balance their worker."""
    return np.flatnonzero(stats.cost > cap + tolerance(stats))


def finish(
    name: str,
    stats: KeyStats,
    current: np.ndarray,
    result: PhaseResult,
    cap: float,
    elapsed: float,
    *,
    iterations: int = 1,
    a_max: int | None = None,
    meta: dict | None = None,
) -> Plan:
    """Wrap a phase result into a :class:`Plan`, computing feasibility flags the same way for all."""
    balanced = bool(result.loads.max() <= cap + tolerance(stats)) if stats.num_workers else True
    plan = Plan(
        planner=name,
        stats=stats,
        current=current,
        assign=result.assign,
        predicted_loads=result.loads,
        cap=cap,
        plan_time_s=elapsed,
        feasible=balanced,
        infeasible_keys=heavy_keys(stats, cap),
        iterations=iterations,
        meta={"candidates": result.candidates, "evictions": result.evictions,
              "unplaced": len(result.unplaced), **(meta or {})},
    )
    if a_max is not None:
        plan.table_overflow = plan.key_entries > a_max
    return plan


def one_trial_plan(
    name: str,
    theta_max: float,
    stats: KeyStats,
    current: np.ndarray | Mapping,
    clean_table: bool,
    order: np.ndarray,
    a_max: int | None = None,
) -> Plan:
    """One LLFD trial: optionally move every table key back home first, then place by ``order`` (desc)."""
    cur = as_current(stats, current)
    with Timer() as t:
        cap = stats.cap(theta_max)
        clean = np.flatnonzero(cur != stats.home) if clean_table else np.empty(0, dtype=np.int64)
        res = run_trial(stats, cur, clean, r_order(order), cap)
    return finish(name, stats, cur, res, cap, t.elapsed, a_max=a_max)


@dataclass
class LLFDPlanner:
    """LLFD alone: no cleaning, cost order. Unbounded table."""

    theta_max: float = 0.08
    name: str = "LLFD"

    def plan(self, stats: KeyStats, current: np.ndarray | Mapping) -> Plan:
        return one_trial_plan(self.name, self.theta_max, stats, current, clean_table=False, order=stats.cost)


@dataclass
class MinTablePlanner:
    """MinTable (Alg. 2): clean the whole table, then LLFD in cost order. Smallest tables, most moves."""

    theta_max: float = 0.08
    a_max: int | None = None
    name: str = "MinTable"

    def plan(self, stats: KeyStats, current: np.ndarray | Mapping) -> Plan:
        return one_trial_plan(
            self.name, self.theta_max, stats, current, clean_table=True, order=stats.cost, a_max=self.a_max
        )


@dataclass
class MinMigPlanner:
    """MinMig (Alg. 3): keep the table, disassociate by ``gamma`` first. Fewest moves, table unbounded."""

    theta_max: float = 0.08
    beta: float = 1.5
    a_max: int | None = None
    name: str = "MinMig"

    def plan(self, stats: KeyStats, current: np.ndarray | Mapping) -> Plan:
        order = migration_priority(stats.cost, stats.mem, self.beta)
        return one_trial_plan(
            self.name, self.theta_max, stats, current, clean_table=False, order=order, a_max=self.a_max
        )
