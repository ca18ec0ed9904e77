"""The benchmark's interval loop: its figures checked against independent computations."""

from __future__ import annotations

import numpy as np
import pytest

from ballast.planner.trigger import TriggerSettings
from ballast.planner.workloads import ZipfWorkload
from ballast.routing.murmur2 import kafka_partition, kafka_partition_array
from bench.controller.loop import LoopConfig, run_loop

pytestmark = pytest.mark.unit

N = 8
EVERY = LoopConfig(num_workers=N, trigger=TriggerSettings(theta=0.08, consecutive=1, min_gap=1))


def trace(f: float, intervals: int = 6):
    wl = ZipfWorkload(2000, 0.7, f, N, seed=3)
    return wl, np.array(list(wl.intervals(intervals)))


def test_hash_realized_is_the_partitioners_max_over_mean():
    wl, costs = trace(1.0)
    run = run_loop(costs, kafka_partition_array(wl.hash_raw, N), wl.hash_raw, "hash", EVERY)
    for t, c in enumerate(costs):
        loads = np.zeros(N)
        for key, n in zip(wl.keys, c, strict=True):
            loads[kafka_partition(key, N)] += n  # the scalar partitioner, key by key
        assert run.realized[t] == pytest.approx(loads.max() / loads.mean())
    assert not run.rebalanced.any() and run.state_moved.sum() == 0


def test_a_stationary_load_is_planned_once_and_then_stays_within_the_tolerance():
    wl, costs = trace(0.0)  # no drift: every interval is the same
    assert np.array_equal(costs[0], costs[-1])
    home = kafka_partition_array(wl.hash_raw, N)
    for policy in ("last", "forecast", "oracle"):
        run = run_loop(costs, home, wl.hash_raw, policy, EVERY)
        assert run.rebalanced.tolist() == [True] + [False] * (len(costs) - 1), policy
        assert run.realized[0] > 1.08 and np.all(run.realized[1:] <= 1.08 + 1e-9), policy
        # the one plan's state moved is a part of the state held, and keys moved match it
        assert 0 < run.state_moved[0] < run.state_held[0] and run.keys_moved[0] > 0


def test_guess_error_of_the_last_interval_is_the_l1_change_between_intervals():
    wl, costs = trace(1.0)
    run = run_loop(costs, kafka_partition_array(wl.hash_raw, N), wl.hash_raw, "last", EVERY)
    for t in range(len(costs) - 1):
        want = np.abs(costs[t] - costs[t + 1]).sum() / costs[t + 1].sum()
        assert run.guess_error[t] == pytest.approx(want)
    assert np.isnan(run.guess_error[-1])


def test_unknown_policy_is_refused():
    wl, costs = trace(0.0, 2)
    with pytest.raises(ValueError):
        run_loop(costs, kafka_partition_array(wl.hash_raw, N), wl.hash_raw, "psychic", EVERY)
