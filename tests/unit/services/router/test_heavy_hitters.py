"""Acceptance 6: on Zipf z=1.0 over K=1e6 keys, the top 100 keys are found with counts within the
documented bound (count - error <= true <= count, error = D <= N/(m+1)); checked against exact counts."""

from __future__ import annotations

import numpy as np

from ballast.workload import zipf_key_ids
from services.router.heavy_hitters import HeavyHitters

K = 1_000_000
N = 3_000_000
BATCH = 10_000
CAPACITY = 10_000


def test_zipf_top_100_within_bound():
    ids = zipf_key_ids(N, K, 1.0, seed=21)
    hh = HeavyHitters(CAPACITY)
    for i in range(0, N, BATCH):
        keys, counts = np.unique(ids[i : i + BATCH], return_counts=True)
        hh.update(dict(zip(keys.tolist(), counts.tolist(), strict=True)))
    truth = np.bincount(ids, minlength=K)
    true_top = np.argsort(truth)[::-1][:100]

    assert hh.total == N
    assert 0 < hh.error_bound <= N / (CAPACITY + 1)
    assert len(hh.counters) <= 2 * CAPACITY
    for key in true_top.tolist():
        est, err = hh.estimate(key)
        assert key in hh.counters, f"top key {key} (true {truth[key]}) not monitored"
        assert est - err <= truth[key] <= est
    reported = hh.top(100)
    cutoff = truth[true_top[-1]]
    for key, est, err in reported:
        assert est - err <= truth[key] <= est
        # anything reported in the top 100 is a real heavy hitter up to the error
        assert truth[key] >= cutoff - 2 * err
    overlap = len({k for k, _, _ in reported} & set(true_top.tolist()))
    assert overlap >= 90


def test_bound_holds_on_adversarial_round_robin():
    hh = HeavyHitters(10)
    truth: dict[int, int] = {}
    for step in range(200):
        batch = {(step * 7 + j) % 500: 1 + (j % 3) for j in range(40)}
        for k, n in batch.items():
            truth[k] = truth.get(k, 0) + n
        hh.update(batch)
    assert hh.error_bound <= hh.total / 11
    for k, t in truth.items():
        est, err = hh.estimate(k)
        assert est - err <= t <= est
