"""LLFD with Adjust: the paper's toy example, termination and the eviction rule, as properties."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from planner_helpers import make_stats, routed_loads

from ballast.planner.heuristics import LLFDPlanner, MinMigPlanner, MinTablePlanner, tolerance
from ballast.planner.llfd import r_order, rebalance
from ballast.planner.stats import KeyStats

pytestmark = pytest.mark.unit


def fig4_stats() -> tuple[KeyStats, np.ndarray]:
    """Paper Fig. 4: d0 = {7,4,5}, d1 = {2,1,1}, theta_max = 0; keys 7 and 2 are table entries."""
    cost = np.array([7, 4, 5, 2, 1, 1], dtype=float)
    home = np.array([1, 0, 0, 0, 1, 1])
    current = np.array([0, 0, 0, 1, 1, 1], dtype=np.int32)
    return KeyStats(np.arange(6), cost, cost.copy(), home, 2), current


def test_fig4_llfd_reaches_perfect_balance():
    stats, current = fig4_stats()
    plan = LLFDPlanner(theta_max=0.0).plan(stats, current)
    assert stats.loads(plan.assign).tolist() == [10.0, 10.0]
    assert plan.feasible


def test_fig4_mintable_gives_two_entries_and_balance():
    stats, current = fig4_stats()
    llfd = LLFDPlanner(theta_max=0.0).plan(stats, current)
    mt = MinTablePlanner(theta_max=0.0).plan(stats, current)
    assert stats.loads(mt.assign).tolist() == [10.0, 10.0]
    assert mt.key_entries == 2  # the paper's result table has 2 entries
    assert llfd.key_entries >= mt.key_entries


instances = st.tuples(
    st.integers(2, 6),  # workers
    st.lists(st.floats(0.0, 100.0, allow_nan=False), min_size=1, max_size=40),
    st.floats(0.0, 0.5),  # theta_max
    st.integers(0, 2**31 - 1),  # seed for the current table
)


def random_current(stats: KeyStats, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    cur = stats.home.copy()
    moved = rng.random(stats.n) < 0.3
    cur[moved] = rng.integers(0, stats.num_workers, moved.sum())
    return cur


def instance(inst) -> tuple[KeyStats, np.ndarray, float]:
    """(statistics, a random current assignment, theta) of one drawn instance."""
    n_workers, costs, theta, seed = inst
    stats = make_stats(costs, num_workers=n_workers)
    return stats, random_current(stats, seed), theta


@settings(max_examples=150, deadline=None)
@given(instances)
def test_llfd_terminates_and_adjust_evicts_only_lighter_keys(inst):
    stats, cur, theta = instance(inst)
    trace: list = []
    res = rebalance(stats.cost, stats.home, cur, cur, r_order(stats.cost), stats.cold_load,
                    stats.cap(theta), tolerance(stats), trace=trace)
    # Termination: it returned, and each key is evicted at most once (bound: n evictions).
    assert res.evictions <= stats.n
    for ck, evicted in trace:
        assert evicted.size > 0
        assert np.all(evicted < ck), (ck, evicted)
        assert np.all(evicted > 0)
    # Every key ends on exactly one valid worker.
    assert res.assign.min() >= 0 and res.assign.max() < stats.num_workers


@settings(max_examples=100, deadline=None)
@given(instances)
def test_every_key_routed_exactly_once_before_and_after(inst):
    stats, cur, theta = instance(inst)
    before_table = {stats.keys[i]: int(cur[i]) for i in np.flatnonzero(cur != stats.home)}
    before = routed_loads(stats, before_table)
    assert before.sum() == pytest.approx(stats.total_load)
    for planner in (LLFDPlanner(theta), MinTablePlanner(theta), MinMigPlanner(theta)):
        plan = planner.plan(stats, before_table)  # a dict table goes in, like the controller's
        after = routed_loads(stats, plan.table)
        assert after.sum() == pytest.approx(stats.total_load)
        assert np.allclose(after, plan.predicted_loads)
        assert all(stats.home[stats.index[k]] != w for k, w in plan.table.items())


@settings(max_examples=100, deadline=None)
@given(instances)
def test_feasible_flag_matches_recomputed_loads(inst):
    stats, cur, theta = instance(inst)
    plan = MinMigPlanner(theta).plan(stats, cur)
    recomputed = routed_loads(stats, plan.table)
    assert plan.feasible == bool(recomputed.max() <= stats.cap(theta) + tolerance(stats))
    if np.any(stats.cost > stats.cap(theta) + tolerance(stats)):
        assert not plan.feasible and plan.infeasible_keys.size > 0
