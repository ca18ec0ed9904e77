"""Mixed: table limit, bounded trials, balance no worse than Simple, infeasibility reported."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from planner_helpers import make_stats, routed_loads

from ballast.planner.baselines import SimplePlanner
from ballast.planner.heuristics import MinMigPlanner, MinTablePlanner, tolerance
from ballast.planner.mixed import MixedPlanner
from ballast.planner.stats import KeyStats

pytestmark = pytest.mark.unit

instances = st.tuples(
    st.integers(2, 6),
    st.lists(st.floats(0.0, 100.0, allow_nan=False), min_size=2, max_size=50),
    st.floats(0.0, 0.3),
    st.integers(0, 2**31 - 1),
)


def random_current(stats: KeyStats, seed: int, frac: float = 0.4) -> np.ndarray:
    rng = np.random.default_rng(seed)
    cur = stats.home.copy()
    moved = rng.random(stats.n) < frac
    cur[moved] = rng.integers(0, stats.num_workers, moved.sum())
    return cur


@settings(max_examples=150, deadline=None)
@given(instances, st.integers(0, 12), st.sampled_from(["gallop", "paper"]))
def test_table_fits_whenever_mintable_fits_and_trials_bounded(inst, a_max, search):
    stats, cur, theta = instance(inst)
    table_before = int(np.count_nonzero(cur != stats.home))
    mt = MinTablePlanner(theta).plan(stats, cur)
    mixed = MixedPlanner(theta, a_max=a_max, search=search, safety_net=False).plan(stats, cur)
    if mt.key_entries <= a_max:
        assert mixed.key_entries <= a_max
        assert not mixed.table_overflow
    assert mixed.iterations <= table_before + 1
    assert mixed.table_overflow == (mixed.key_entries > a_max)


def rng_mems(costs, seed):
    # Window memory decoupled from cost (w > 1: a key's state reflects older intervals too).
    rng = np.random.default_rng(seed + 1)
    return np.asarray(costs) * rng.uniform(0.2, 3.0, len(costs))


def instance(inst) -> tuple[KeyStats, np.ndarray, float]:
    """(statistics with random memory, a random current assignment, theta) of one drawn instance."""
    n_workers, costs, theta, seed = inst
    stats = make_stats(costs, rng_mems(costs, seed), num_workers=n_workers)
    return stats, random_current(stats, seed), theta


@settings(max_examples=150, deadline=None)
@given(instances)
def test_mixed_never_worse_balanced_than_simple_when_simple_meets_cap(inst):
    stats, cur, theta = instance(inst)
    cap = stats.cap(theta) + tolerance(stats)
    simple = SimplePlanner(theta).plan(stats, cur)
    simple_loads = routed_loads(stats, simple.table)
    if simple_loads.max() <= cap:
        mixed = MixedPlanner(theta, a_max=10**9).plan(stats, cur)
        mixed_loads = routed_loads(stats, mixed.table)
        assert mixed_loads.max() <= cap
        assert mixed.feasible


@settings(max_examples=100, deadline=None)
@given(instances)
def test_without_table_pressure_mixed_is_minmig_or_better(inst):
    # With a non-empty table and no pressure Mixed *is* MinMig (n = 0, one trial). With an empty
    # table its first trial is also the last (n = |A| = 0), which also tries MinTable's order and
    # keeps the better: never less balanced, and never more migration at equal balance.
    stats, cur, theta = instance(inst)
    mm = MinMigPlanner(theta).plan(stats, cur)
    mixed = MixedPlanner(theta, a_max=10**9, safety_net=False).plan(stats, cur)
    assert mixed.iterations == 1
    if np.any(cur != stats.home):
        assert np.array_equal(mm.assign, mixed.assign)
    else:
        assert mixed.feasible or not mm.feasible
        if mixed.feasible == mm.feasible:
            assert mixed.migration_cost <= mm.migration_cost + 1e-9


def test_single_hot_key_is_reported_not_raised():
    costs = [50.0] + [1.0] * 40  # mean 22.75 over 4 workers: the 50 cannot fit under any cap < 1.2
    stats = make_stats(costs, num_workers=4)
    plan = MixedPlanner(theta_max=0.08, a_max=100).plan(stats, stats.home.copy())
    assert not plan.feasible
    assert plan.infeasible_keys.tolist() == [0]
    loads = routed_loads(stats, plan.table)
    # The hot key is isolated: its worker carries it plus at most the tolerance slack.
    hot_worker = int(plan.assign[0])
    assert loads[hot_worker] <= 50.0 + 0.08 * stats.mean_load + 1e-9
    others = np.delete(loads, hot_worker)
    assert others.max() <= stats.cap(0.08) + 1e-9


def test_mixed_cleans_only_when_table_is_too_large():
    rng = np.random.default_rng(3)
    costs = rng.pareto(1.2, 400) + 0.01
    stats = make_stats(costs, num_workers=8)
    cur = random_current(stats, 5, frac=0.5)
    loose = MixedPlanner(0.05, a_max=10**9, safety_net=False).plan(stats, cur)
    tight_limit = max(1, loose.key_entries // 2)
    tight = MixedPlanner(0.05, a_max=tight_limit, safety_net=False).plan(stats, cur)
    assert loose.meta["cleaned"] == 0
    mt = MinTablePlanner(0.05).plan(stats, cur)
    assert mt.key_entries <= tight_limit  # precondition: the limit is achievable
    assert tight.key_entries <= tight_limit
    assert tight.meta["cleaned"] > 0
    assert tight.migration_cost >= loose.migration_cost - 1e-9
