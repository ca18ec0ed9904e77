"""Acceptance 1, the pure half: the time lag the shedder estimates from sampled end offsets is within
10% (median) of the exact time lag, under steady and step-changing input, for a router group and for
the reduce, with skewed and lagging partitions and a stalled consumer.

The truth is computed from a simulated log whose every record's append time is known: the exact time
lag at ``t`` is ``t`` minus the append time of the record at the committed offset (0 when there is
none). The estimator sees only what the shedder sees: the log-end offset and the group's position at
each sample (every 5 s, jittered), and for the reduce the end offsets of its last finished micro-batch
(its ``ReduceProgress``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest

from services.shedder.lag_table import LagTable

pytestmark = pytest.mark.unit

HORIZON_S = 600.0
SAMPLE_S = 5.0
WEIGHTS = (1.0, 1.0, 2.0, 0.25)  # skewed partitions: shares of the input
REDUCE_CAPS = (2.0, 0.8, 1.1, 2.0)  # the reduce's records per trigger, in triggers' worth of mean input
SCENARIOS = {  # (start, end, records/s over all partitions)
    "steady": [(0.0, 600.0, 300.0)],
    "steps": [(0.0, 150.0, 200.0), (150.0, 300.0, 800.0), (300.0, 360.0, 0.0), (360.0, 600.0, 300.0)],
}


def simulated_log(rng: np.random.Generator, segments, share: float) -> np.ndarray:
    """The append times of one partition's records (Poisson arrivals at ``share`` of each rate)."""
    parts = []
    for start, end, rate in segments:
        n = rng.poisson(rate * share * (end - start))
        parts.append(np.sort(rng.uniform(start, end, n)))
    return np.concatenate(parts)


def mean_rate(segments) -> float:
    return sum((e - s) * r for s, e, r in segments) / HORIZON_S


@dataclass
class Positions:
    """A consumer's committed offsets over time: ``at(t)`` is the position it had published by ``t``."""

    times: np.ndarray
    offsets: np.ndarray

    def at(self, t: float) -> int:
        i = np.searchsorted(self.times, t, side="right") - 1
        return int(self.offsets[i]) if i >= 0 else 0


def router_group(log: np.ndarray, capacity: Callable[[float], float], commit_s: float = 1.0) -> Positions:
    """A consumer reading up to ``capacity(t)`` records/s and committing every ``commit_s``."""
    times = np.arange(0.0, HORIZON_S + commit_s, commit_s)
    offsets, c = [], 0.0
    for t in times:
        end = np.searchsorted(log, t, side="right")
        c = min(float(end), c + capacity(t) * commit_s)
        offsets.append(int(c))
    return Positions(times, np.array(offsets))


def reduce_job(log: np.ndarray, cap: int, trigger_s: float = 2.0, per_s: float = 4_000.0) -> Positions:
    """Micro-batches every ``trigger_s``, each reading at most ``cap`` records of the partition (Spark's
    max offsets per trigger); a batch's end offsets are published when it finishes."""
    done, offsets, c, t = [], [], 0, 0.0
    while t < HORIZON_S:
        end = min(int(np.searchsorted(log, t, side="right")), c + cap)
        finished = t + 0.3 + (end - c) / per_s
        c = end
        done.append(finished)
        offsets.append(c)
        t = max(t + trigger_s, finished)
    return Positions(np.array(done), np.array(offsets))


@dataclass
class Samples:
    """One partition's shedder samples: their times, the estimated and the exact time lag."""

    times: np.ndarray
    estimated: np.ndarray
    exact: np.ndarray


def sample(log: np.ndarray, consumer: Positions, rng: np.random.Generator) -> Samples:
    """What the shedder does every ``SAMPLE_S`` (jittered): add the end offset, estimate the lag."""
    table = LagTable()
    times, estimated, exact = [], [], []
    for k in range(1, int(HORIZON_S / SAMPLE_S)):
        t = k * SAMPLE_S + float(rng.uniform(-1.0, 1.0))
        committed = consumer.at(t)
        end = int(np.searchsorted(log, t, side="right"))
        table.add(end, t)
        times.append(t)
        estimated.append(table.time_lag(committed, t).seconds)
        exact.append(t - log[committed] if committed < end else 0.0)
    return Samples(np.array(times), np.array(estimated), np.array(exact))


def capacities(share_rate: float) -> list[Callable[[float], float]]:
    """Per partition of the router group: a fast consumer, a lagging one (0.8x the mean input), a
    barely fast one and one that stalls."""
    return [
        lambda t: 2.0 * share_rate,
        lambda t: 0.8 * share_rate,
        lambda t: 1.1 * share_rate,
        lambda t: 0.0 if 200.0 <= t < 320.0 else 2.0 * share_rate,
    ]


def run(scenario: str, consumer: str, seed: int) -> list[Samples]:
    """Every partition's samples of one consumer over one scenario's log."""
    rng = np.random.default_rng(seed)
    segments = SCENARIOS[scenario]
    samples = []
    for p, w in enumerate(WEIGHTS):
        share = w / sum(WEIGHTS)
        log = simulated_log(rng, segments, share)
        rate = mean_rate(segments) * share
        if consumer == "router":
            positions = router_group(log, capacities(rate)[p])
        else:
            positions = reduce_job(log, cap=int(REDUCE_CAPS[p] * 2.0 * rate))
        samples.append(sample(log, positions, rng))
    return samples


@pytest.mark.parametrize("seed", [18, 19, 20])
@pytest.mark.parametrize("consumer", ["router", "reduce"])
@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_the_estimate_is_within_10_percent_of_the_exact_time_lag(scenario, consumer, seed):
    samples = run(scenario, consumer, seed)
    estimated = np.concatenate([s.estimated for s in samples])
    exact = np.concatenate([s.exact for s in samples])
    lagging = exact > 0
    relative = np.abs(estimated[lagging] - exact[lagging]) / exact[lagging]
    assert np.median(relative) < 0.10
    # below the sampling interval the table cannot resolve better than the arrivals within one
    # interval; from one interval on, the error is a few percent at most
    long = exact[lagging] >= SAMPLE_S
    assert long.sum() > 20 and np.median(relative[long]) < 0.02 and np.percentile(relative[long], 90) < 0.05
    assert np.all(estimated[~lagging] == 0.0)  # nothing unread: no lag


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_a_stalled_consumer_s_estimate_grows_with_the_clock(scenario):
    stalled = run(scenario, "router", seed=18)[3]  # partition 3's consumer stops from 200 to 320 s
    during = (stalled.times > 205.0) & (stalled.times < 320.0)
    assert during.sum() >= 20
    np.testing.assert_allclose(np.diff(stalled.estimated[during]), np.diff(stalled.times[during]))
    np.testing.assert_allclose(np.diff(stalled.exact[during]), np.diff(stalled.times[during]))
    # and the level is right: the record it stopped at is dated to within a tenth of a sample interval
    np.testing.assert_allclose(stalled.estimated[during], stalled.exact[during], atol=SAMPLE_S / 10)
