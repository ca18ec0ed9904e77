"""Arrival and service rates: exact under a steady rate, smoothed over time (not samples), summed over
a group's partitions, and the rate identity d(lag)/dt = arrival - service."""

from __future__ import annotations

import math

import numpy as np
import pytest

from services.shedder.rates import PartitionRates, RateMeter, Rates, drain_time_s, group_rates

pytestmark = pytest.mark.unit


def test_a_steady_counter_gives_its_rate_from_the_first_interval_on():
    meter = RateMeter(tau_s=30.0)
    assert meter.update(0, 0.0) is None
    for t in range(1, 20):
        assert meter.update(250 * t, float(t)) == pytest.approx(250.0)


def test_the_step_response_follows_the_time_constant_however_the_time_is_sampled():
    # 100/s until t=60, then 400/s: the smoothed rate at 60 + s is 400 - 300 * exp(-s / tau)
    tau = 20.0

    def count(t: float) -> float:
        return 100 * t if t <= 60 else 6_000 + 400 * (t - 60)

    for every in (0.5, 1.0, 3.0, 6.0):
        rng = np.random.default_rng(int(every * 10))
        meter = RateMeter(tau_s=tau)
        times = [0.0]
        while times[-1] < 60:
            times.append(min(60.0, times[-1] + every * float(rng.uniform(0.5, 1.5))))
        for s in (10.0, 30.0, 60.0):  # uneven samples between, one exactly at each check
            while times[-1] < 60 + s:
                times.append(min(60 + s, times[-1] + every * float(rng.uniform(0.5, 1.5))))
        rates = {}
        for t in times:
            rates[t] = meter.update(round(count(t) * 1000), t)  # milli-records: no rounding error
        for s in (10.0, 30.0, 60.0):
            assert rates[60 + s] / 1000 == pytest.approx(400 - 300 * math.exp(-s / tau), rel=1e-6), every


def test_offsets_that_go_back_or_times_that_do_not_advance_make_no_interval():
    meter = RateMeter(tau_s=10.0)
    meter.update(1_000, 0.0)
    meter.update(2_000, 10.0)
    assert meter.rate == pytest.approx(100.0)
    assert meter.update(50, 11.0) == pytest.approx(100.0)  # rewound: kept
    assert meter.update(5_000, 11.0) == pytest.approx(100.0)  # same time: ignored
    assert meter.update(1_050, 21.0) == pytest.approx(100.0)  # 50 -> 1,050 in 10 s: 100/s again


def test_kafka_s_no_offset_and_broken_times_are_ignored():
    meter = RateMeter()
    assert meter.update(100, math.nan) is None  # even as the first sample
    meter.update(-1001, 1.0)
    meter.update(100, 2.0)
    meter.update(-1, 3.0)
    meter.update(300, math.inf)
    assert meter.update(400, 5.0) == pytest.approx(100.0)  # 100 at 2 s to 400 at 5 s


def test_a_group_s_rates_are_its_partitions_summed_and_the_lag_grows_by_their_difference():
    # three partitions: arrivals 100, 300 and 20/s; the group consumes 150, 100 and 0/s (stalled)
    arrival, service = (100, 300, 20), (150, 100, 0)
    parts = [PartitionRates(tau_s=15.0) for _ in arrival]
    committed = [0, 0, 500]
    lags = []
    for t in range(0, 301):
        ends = [a * t + 1_000 for a in arrival]
        committed = [min(e, c + (s if t else 0)) for e, c, s in zip(ends, committed, service, strict=True)]
        for p, e, c in zip(parts, ends, committed, strict=True):
            p.update(float(t), e, c)
        lags.append(sum(e - c for e, c in zip(ends, committed, strict=True)))
    rates = group_rates(parts)
    # partition 0 caught up at t=20 (its service is capped by its arrival): 100 + 100 + 0 consumed
    assert rates.arrival == pytest.approx(420.0)
    assert rates.service == pytest.approx(200.0, rel=1e-6)
    assert rates.growth == pytest.approx((lags[-1] - lags[-11]) / 10.0, rel=1e-6)


def test_a_partition_without_a_position_adds_to_arrival_only():
    p = PartitionRates()
    p.update(0.0, 0, None)
    p.update(10.0, 500, None)
    assert group_rates([p, PartitionRates()]) == Rates(50.0, 0.0)


def test_drain_time():
    assert drain_time_s(1_000, Rates(100.0, 150.0)) == pytest.approx(20.0)
    assert drain_time_s(1_000, Rates(150.0, 150.0)) == math.inf
    assert drain_time_s(0, Rates(150.0, 10.0)) == 0.0


def test_the_arrival_rate_may_forget_faster_than_the_service_rate():
    rates = PartitionRates(tau_s=10.0, arrival_tau_s=3.0)
    for t in range(0, 21, 2):  # 1000/s written and read
        rates.update(float(t), 1000 * t, 1000 * t)
    for t in range(22, 27, 2):  # the input drops to 250/s; the reader drains at 1000/s
        rates.update(float(t), 20_000 + 250 * (t - 20), 1000 * t)
    # 6 s later the arrival rate is most of the way to 250/s (351); a 10 s constant would say 662
    assert rates.arrival.rate is not None and rates.arrival.rate < 400
    assert rates.service.rate == pytest.approx(1000.0)
