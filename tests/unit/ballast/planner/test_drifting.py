"""The drifting workloads: swaps at instants inside intervals, and bursts that rise and decay."""

from __future__ import annotations

import numpy as np
import pytest

from ballast.planner.drifting import BurstWorkload, TimedSwapWorkload, burst_rates
from ballast.planner.workloads import ZipfWorkload, fluctuate, swap_pairs
from ballast.routing.murmur2 import kafka_partition_array
from ballast.workload import zipf_probabilities

pytestmark = pytest.mark.unit


def test_swap_pairs_is_fluctuate_plus_the_pairs():
    p = zipf_probabilities(500, 0.9)
    home = np.arange(500) % 7
    q1, c1 = fluctuate(p, home, 7, 1.0, np.random.default_rng(2))
    q2, c2, pairs = swap_pairs(p, home, 7, 1.0, np.random.default_rng(2))
    assert np.array_equal(q1, q2) and c1 == c2
    # the pairs are exactly the swaps: disjoint keys on different workers, values exchanged
    assert len(np.unique(pairs)) == pairs.size
    assert np.all(home[pairs[:, 0]] != home[pairs[:, 1]])
    assert np.array_equal(q2[pairs[:, 0]], p[pairs[:, 1]]) and np.array_equal(q2[pairs[:, 1]], p[pairs[:, 0]])
    untouched = np.setdiff1d(np.arange(500), pairs.ravel())
    assert np.array_equal(q2[untouched], p[untouched])


def test_timed_swaps_blend_each_pair_at_its_instant():
    wl = TimedSwapWorkload(2000, 0.85, 1.0, 10, seed=4)
    got = list(wl.intervals(5))
    # Replay the generator's draws independently: the underlying frequencies and each pair's instant.
    rng = np.random.default_rng(4)
    home = kafka_partition_array(wl.hash_raw, 10)
    p = np.empty(2000)
    p[rng.permutation(2000)] = zipf_probabilities(2000, 0.85)
    assert np.allclose(got[0], p * 1e6)
    for t in range(1, 5):
        q, _, pairs = swap_pairs(p, home, 10, 1.0, rng)
        s = rng.random(len(pairs))
        rng.random(len(pairs))  # the fade lengths (zero without fades)
        want = q.copy()
        for col in (0, 1):
            k = pairs[:, col]
            want[k] = s * p[k] + (1 - s) * q[k]  # before the instant: old; after: new
        assert np.allclose(got[t], want * 1e6)
        assert got[t].sum() == pytest.approx(1e6)  # a swap moves load, it does not create it
        p = q


def test_a_fade_spreads_the_swap_over_the_intervals_it_lasts():
    fade = np.array(list(TimedSwapWorkload(2000, 0.85, 1.0, 10, seed=4, fade_max=2.0).intervals(6)))
    step = np.array(list(TimedSwapWorkload(2000, 0.85, 1.0, 10, seed=4, fade_max=0.0).intervals(6)))
    assert np.array_equal(fade[0], step[0])
    # both start from the same frequencies; with fades the first swaps are still under way in
    # interval 1, so fewer keys have moved far from their start than with steps
    assert np.abs(fade[1] - fade[0]).sum() < np.abs(step[1] - step[0]).sum()


def test_burst_rate_shape_by_hand():
    # start 1.0, rise 2, hold 1, half-life 0.5, peak 100
    shape = np.array([[1.0, 2.0, 1.0, 0.5, 100.0]])
    times = np.array([0.5, 1.0, 2.0, 3.0, 3.5, 4.0, 4.5, 5.0])
    want = [0.0, 0.0, 50.0, 100.0, 100.0, 100.0, 50.0, 25.0]
    assert burst_rates(shape, times)[0].tolist() == pytest.approx(want)
    # no ramp: the peak at once
    assert burst_rates(np.array([[1.0, 0.0, 1.0, 1.0, 8.0]]), np.array([0.9, 1.0, 2.0, 3.0]))[0].tolist() == [
        0.0, 8.0, 8.0, 4.0]


def test_bursts_are_seeded_sit_on_the_background_and_stay_within_their_peak():
    a = np.array(list(BurstWorkload(3000, num_workers=10, seed=3, sampled=False).intervals(30)))
    b = np.array(list(BurstWorkload(3000, num_workers=10, seed=3, sampled=False).intervals(30)))
    assert np.array_equal(a, b)
    base = a[0].min()  # every key has its Zipf background
    assert base > 0
    background = np.empty(3000)
    rng = np.random.default_rng(3)
    background[rng.permutation(3000)] = zipf_probabilities(3000, 0.8) * 1e6
    extra = a - background
    assert extra.min() > -1e-6  # bursts only add
    assert extra.max() <= 1.0 * 1e6 / 10 * 3  # at most peak_max per burst (a few may overlap on a key)
    assert (extra > 1.0).sum() > 0


def test_sampled_bursts_are_poisson_counts():
    c = np.array(list(BurstWorkload(3000, num_workers=10, seed=3).intervals(3)))
    assert np.array_equal(c, np.round(c)) and c.min() >= 0


def test_zipf_workload_draws_exactly_as_before_the_pair_bookkeeping():
    # fluctuate() now delegates to swap_pairs(); ZipfWorkload must draw exactly as before. The
    # fingerprint was taken from the implementation before the change (same seed and sizes).
    a = list(ZipfWorkload(1000, 0.85, 1.0, 10, seed=4).intervals(4))
    assert [int(np.argmax(x)) for x in a] == [413, 419, 983, 983]
    assert float((a[3] * np.arange(1000)).sum()) == pytest.approx(572206152.6386949, rel=1e-12)
