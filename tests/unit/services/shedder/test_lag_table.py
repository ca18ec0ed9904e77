"""The lag table: offset lag to time lag by interpolation, every edge (caught up, before the table,
stalled producer, clock and log going back, retention), and the bound with its thinning rule.

The truths are written by hand from the simulated producer's known rate, never read off the table."""

from __future__ import annotations

import math
from itertools import pairwise

import numpy as np
import pytest

from services.shedder.lag_table import Added, Kind, LagTable, Point

pytestmark = pytest.mark.unit


def steady(table: LagTable, rate: float, start: float, end: float, every: float, base: int = 0) -> None:
    """Sample a producer writing ``rate`` records/s from ``start``: end offset ``base + rate*(t-start)``."""
    t = start
    while t <= end + 1e-9:
        table.add(base + round(rate * (t - start)), t)
        t += every


def test_between_points_the_append_time_is_interpolated_at_the_offset_after_the_record():
    table = LagTable()
    steady(table, 100.0, 0.0, 100.0, 10.0)
    # record o is appended when the end offset reaches o + 1, at (o + 1) / 100 s
    for committed in (0, 1, 499, 999, 4321, 9998):
        lag = table.time_lag(committed, now=120.0)
        assert lag.kind is Kind.INTERPOLATED
        assert lag.seconds == pytest.approx(120.0 - (committed + 1) / 100.0)
        assert lag.records == 10_000 - committed


def test_a_consumer_at_or_past_the_newest_end_has_no_lag():
    table = LagTable()
    steady(table, 100.0, 0.0, 50.0, 5.0)
    for committed in (5_000, 5_003):  # past it: read after the end was sampled
        lag = table.time_lag(committed, now=60.0)
        assert (lag.seconds, lag.records, lag.kind) == (0.0, 0, Kind.CAUGHT_UP)


def test_an_empty_table_knows_nothing_and_one_point_gives_a_lower_bound_that_grows():
    table = LagTable()
    lag = table.time_lag(5, now=1.0)
    assert math.isnan(lag.seconds) and lag.kind is Kind.UNKNOWN
    table.add(100, 10.0)
    for now in (10.0, 25.0, 70.0):
        lag = table.time_lag(40, now=now)
        assert lag.kind is Kind.AT_LEAST and lag.seconds == now - 10.0 and lag.records == 60


def test_a_stalled_producer_keeps_two_points_and_a_stalled_consumer_s_lag_grows_with_the_clock():
    table = LagTable()
    steady(table, 50.0, 0.0, 100.0, 10.0)  # 5,000 records by t=100, then nothing more
    for t in range(110, 1000, 10):
        assert table.add(5_000, float(t)) is (Added.INSERTED if t == 110 else Added.UPDATED)
    assert table.points[-2:] == [Point(5_000, 100.0), Point(5_000, 990.0)]
    appended = (2_000 + 1) / 50.0  # record 2,000 at 40.02 s
    for now in (200.0, 500.0, 990.0, 5_000.0):
        assert table.time_lag(2_000, now).seconds == pytest.approx(now - appended)
    assert table.time_lag(5_000, 990.0).seconds == 0.0  # the one that read everything


def test_records_right_after_a_plateau_get_the_time_it_ended():
    table = LagTable()
    steady(table, 100.0, 0.0, 100.0, 10.0)  # 10,000 by t=100
    for t in range(110, 300, 10):  # stalled until 290
        table.add(10_000, float(t))
    steady(table, 100.0, 290.0, 400.0, 10.0, base=10_000)
    # record 10,000 was written in (290, 300]: 290 + 1/100 under the restarted rate
    assert table.append_time(10_000).time == pytest.approx(290.01)
    assert table.append_time(9_999).time == pytest.approx(100.0)  # the last before the stall


def test_before_the_table_the_rate_is_the_table_s_without_its_trailing_plateau():
    table = LagTable()
    steady(table, 50.0, 100.0, 200.0, 10.0, base=5_000)  # sampling starts at t=100, offset 5,000
    for t in range(210, 2000, 10):
        table.add(10_000, float(t))  # the producer stopped at t=200
    # the producer ran at 50/s before the table too: record 2,500 was appended at 100 - (5,000-2,501)/50
    expected = 100.0 - (5_000 - 2_501) / 50.0
    estimate = table.append_time(2_500)
    assert estimate.kind is Kind.EXTRAPOLATED and estimate.time == pytest.approx(expected)
    # kafka-lag-exporter's oldest-to-newest line would put it at a rate of 5,000 / 1,890 s
    kle = 1990.0 - (10_000 - 2_501) * (1990.0 - 100.0) / (10_000 - 5_000)
    assert abs(kle - expected) > 800  # 15 minutes off


def test_a_flat_table_bounds_an_older_record_by_its_oldest_point():
    table = LagTable()
    table.add(800, 10.0)
    table.add(800, 20.0)
    table.add(800, 30.0)
    estimate = table.append_time(100)
    assert estimate.kind is Kind.AT_LEAST and estimate.time == 10.0


def test_a_point_not_after_the_newest_is_ignored():
    table = LagTable()
    table.add(100, 10.0)
    table.add(200, 20.0)
    assert table.add(300, 20.0) is Added.OUT_OF_ORDER
    assert table.add(300, 15.0) is Added.OUT_OF_ORDER
    assert table.points == [Point(100, 10.0), Point(200, 20.0)]


def test_kafka_s_no_offset_and_broken_times_are_ignored():
    table = LagTable()
    assert table.add(100, math.nan) is Added.INVALID  # even as the first point
    assert table.add(-1, 5.0) is Added.INVALID  # Kafka's "no offset"
    assert table.add(100, 10.0) is Added.INSERTED
    assert table.add(300, math.inf) is Added.INVALID
    assert table.points == [Point(100, 10.0)]
    lag = table.time_lag(-1001, now=20.0)  # no committed offset: no lag known
    assert math.isnan(lag.seconds) and lag.kind is Kind.UNKNOWN


def test_a_log_that_went_back_restarts_the_table():
    table = LagTable()
    steady(table, 100.0, 0.0, 100.0, 10.0)
    assert table.add(40, 110.0) is Added.RESET  # the topic was recreated: 40 records in the new log
    assert table.points == [Point(40, 110.0)]
    assert table.add(540, 115.0) is Added.INSERTED
    # record 139 of the new log: the end reached 140 at 110 + 100/500 * 5 = 111 s
    assert table.append_time(139).time == pytest.approx(111.0)


def test_a_position_before_the_log_start_is_measured_from_the_first_record_left():
    table = LagTable()
    steady(table, 100.0, 0.0, 100.0, 10.0)
    lag = table.time_lag(10, now=100.0, log_start=3_000)  # retention deleted 0..2,999
    assert lag.seconds == pytest.approx(100.0 - 3_001 / 100.0)
    assert lag.records == 7_000
    assert table.time_lag(9_000, now=100.0, log_start=3_000).seconds == pytest.approx(100.0 - 90.01)


def test_the_table_is_bounded_and_keeps_its_oldest_and_newest_points():
    rng = np.random.default_rng(7)
    table = LagTable(capacity=16)
    end, t = 0, 0.0
    first = None
    for _ in range(5_000):
        t += float(rng.uniform(1.0, 9.0))
        end += int(rng.integers(0, 2_000))
        table.add(end, t)
        first = first or table.points[0]
        assert len(table) <= 16
    points = table.points
    assert points[0] == first and points[-1] == Point(end, t)
    assert all(a.time < b.time and a.offset <= b.offset for a, b in pairwise(points))


def test_thinning_keeps_the_knee_of_a_rate_change():
    table = LagTable(capacity=8)
    steady(table, 10.0, 0.0, 3_600.0, 5.0)  # an hour at 10/s, then an hour at 1,000/s
    steady(table, 1_000.0, 3_600.0, 7_200.0, 5.0, base=36_000)
    assert Point(36_000, pytest.approx(3_600.0)) in table.points
    # both hours are then exact: record 18,000 at 1,800.1 s, record 1,036,000 at 4,600.001 s
    assert table.append_time(18_000).time == pytest.approx(1_800.1)
    assert table.append_time(1_036_000).time == pytest.approx(4_600.001)


def _history(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Two hours of a producer whose rate changes every 10 minutes (10..1,000/s, one 10-minute stall):
    the exact end offset at each second, as (times, ends)."""
    rng = np.random.default_rng(seed)
    rates = rng.uniform(10.0, 1_000.0, 12)
    rates[5] = 0.0
    times = np.arange(0.0, 7_201.0)
    ends = np.concatenate([[0.0], np.cumsum(np.repeat(rates, 600))]).round()
    return times, ends


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_thinning_keeps_long_lags_accurate_where_keeping_the_newest_points_does_not(seed):
    times, ends = _history(seed)
    table = LagTable(capacity=32)
    for t in range(0, 7_201, 5):  # a sample every 5 s: 1,441 points into 32
        table.add(int(ends[t]), float(t))
    newest = LagTable(capacity=10_000)  # kafka-lag-exporter's rule: only the newest 32 points
    for t in range(7_200 - 31 * 5, 7_201, 5):
        newest.add(int(ends[t]), float(t))
    ours, theirs = [], []
    for committed in np.linspace(1, ends[-1] - 1, 400).astype(int):
        # the truth: the first second at which the exact end offset exceeded the record's offset
        appended = times[np.searchsorted(ends, committed + 1)]
        true_lag = 7_200.0 - appended
        if true_lag < 60.0:
            continue
        ours.append(abs(table.time_lag(int(committed), 7_200.0).seconds - true_lag) / true_lag)
        theirs.append(abs(newest.time_lag(int(committed), 7_200.0).seconds - true_lag) / true_lag)
    assert np.median(ours) < 0.01 and np.max(ours) < 0.05
    assert np.median(theirs) > 0.10  # extrapolating 2 hours from the last 155 s
