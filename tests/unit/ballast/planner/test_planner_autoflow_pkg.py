"""AutoFlow's hotspot-diminishing round and the PKG reference."""

import numpy as np
import pytest
from planner_helpers import make_stats, routed_loads

from ballast.planner.autoflow import AutoFlowPlanner, hotspot_round
from ballast.planner.pkg import PKGPlanner, pkg_loads

pytestmark = pytest.mark.unit


def test_worked_example_from_the_digest():
    # totals {A:100, B:20}; A's slots {s1:50, s2:30, s3:20}: gap 40 -> skip s1, take s2, skip s3.
    slot_load = np.array([50.0, 30.0, 20.0, 20.0])
    owner = np.array([0, 0, 0, 1])
    loads = np.array([100.0, 20.0])
    assert hotspot_round(slot_load, owner, loads, factor=0.2) == [1]
    assert hotspot_round(slot_load, owner, np.array([100.0, 95.0]), factor=0.2) == []  # no trigger


def test_single_hot_slot_is_never_moved():
    slot_load = np.array([90.0, 0.0])
    assert hotspot_round(slot_load, np.array([0, 1]), np.array([90.0, 0.0]), factor=0.0) == []


def test_untouched_slot_table_routes_like_kafka_and_moves_conserve_load():
    rng = np.random.default_rng(1)
    stats = make_stats(rng.pareto(1.0, 300) + 0.1, num_workers=5)
    slot = stats.hash_raw % (5 * 16)
    assert np.array_equal(slot % 5, stats.home)  # N | S: slot default owner is h(k)
    plan = AutoFlowPlanner(max_rounds=3).plan(stats, stats.home.copy())
    loads = routed_loads(stats, plan.table)
    assert loads.sum() == pytest.approx(stats.total_load)
    assert loads.max() <= stats.loads(stats.home).max() + 1e-9  # never overshoots the busiest
    # Keys of one slot always share an owner (the slot is the unit of migration).
    for s in np.unique(slot):
        assert np.unique(plan.assign[slot == s]).size == 1
    assert plan.table_size == int(np.count_nonzero(
        np.bincount(slot, minlength=80) * 0 + (np.arange(80) % 5) != _owners(plan, slot)))


def _owners(plan, slot):
    owner = np.arange(80) % 5
    owner[slot] = plan.assign
    return owner


def test_pkg_conserves_load_and_balances_two_choices():
    cost = np.array([100.0] + [1.0] * 200)
    first = np.arange(201) % 4
    second = (first + 1) % 4
    loads, split = pkg_loads(cost, first, second, np.zeros(4))
    assert loads.sum() == pytest.approx(cost.sum())
    assert split >= 1
    stats = make_stats(cost, num_workers=4)
    plan = PKGPlanner().plan(stats, stats.home.copy())
    assert plan.table_size == 0 and plan.migration_cost == 0
    assert plan.predicted_loads.sum() == pytest.approx(cost.sum())
    assert plan.predicted_loads.max() < stats.loads(stats.home).max()
