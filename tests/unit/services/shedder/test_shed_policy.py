"""The shedding policy one cycle at a time, against figures worked out by hand in each test.

Defaults unless a test says otherwise: headroom 0.05, drain horizon 30 s, lift margin 0.5, rising
cycles 2, overload margin 0.05, step factor 2 or 0.25, min change 0.05, and a 5 s cycle.
"""

from __future__ import annotations

import math

import pytest

from services.shedder.config import PolicySettings, StreamDeclaration
from services.shedder.policy import (
    Mode,
    Observation,
    SheddingPolicy,
    Status,
    Trend,
    allocate,
    bounded_step,
)

pytestmark = pytest.mark.unit

CYCLE = 5.0
FLAT, RISING, FALLING = Trend.FLAT, Trend.RISING, Trend.FALLING


def one(min_accuracy: float = 0.2, target_s: float = 30.0, **knobs) -> SheddingPolicy:
    return SheddingPolicy(PolicySettings(**knobs), [StreamDeclaration("in", target_s, 0, min_accuracy)])


def obs(keep=1.0, lag=0.0, trend=FLAT, arrival=1000.0, backlog=None) -> dict[str, Observation]:
    return {"in": Observation(keep, lag, trend, arrival, backlog)}


# --- the allocation (Stream-Economics: minimums first, then by priority) ---------------------------


def test_the_higher_priority_is_served_whole_before_the_lower_gets_more_than_its_floor():
    # floors 0.2*1000 + 0.5*500 = 450 of 1000; high needs 250 more -> 1.0; low gets the 300 left
    goals, feasible = allocate(1000.0, [("low", 0, 1000.0, 0.2), ("high", 1, 500.0, 0.5)])
    assert feasible and goals == {"high": 1.0, "low": pytest.approx(0.5)}


def test_equal_priorities_share_evenly_in_records_smallest_need_first():
    # floors 50 + 500 + 500 = 1050 of 1300: 250 left; a needs 50 (< 250/3) -> whole; b, c 100 each
    goals, feasible = allocate(1300.0, [("a", 0, 100.0, 0.5), ("b", 0, 1000.0, 0.5), ("c", 0, 1000.0, 0.5)])
    assert feasible and goals == {"a": 1.0, "b": pytest.approx(0.6), "c": pytest.approx(0.6)}


def test_floors_over_the_budget_are_infeasible_and_every_goal_is_its_floor():
    streams = [("low", 0, 1000.0, 0.2), ("high", 1, 500.0, 0.5), ("idle", 0, 0.0, 0.3)]
    goals, feasible = allocate(400.0, streams)
    assert not feasible and goals == {"low": 0.2, "high": 0.5, "idle": 1.0}  # no arrivals: costs nothing
    assert allocate(-10.0, [("a", 0, 10.0, 0.1)]) == ({"a": 0.1}, False)


def test_the_bounded_step_moves_by_a_factor_2_or_0_25_whichever_is_more():
    assert [bounded_step(k, 0.1, 2.0, 0.25) for k in (1.0, 0.5, 0.25)] == [0.5, 0.25, 0.1]
    assert [bounded_step(k, 1.0, 2.0, 0.25) for k in (0.01, 0.26, 0.52, 0.9)] == [0.26, 0.52, 1.0, 1.0]
    assert bounded_step(0.6, 0.45, 2.0, 0.25) == 0.45  # within one step: straight to the goal


def test_any_lift_completes_in_3_cycles_and_any_shed_from_1_in_3():
    for k in [i / 1000 for i in range(1, 1001)]:
        x = k
        for _ in range(3):
            x = bounded_step(x, 1.0, 2.0, 0.25)
        assert x == 1.0, k
    for goal in [i / 1000 for i in range(0, 1001)]:
        x = 1.0
        for _ in range(3):
            x = bounded_step(x, goal, 2.0, 0.25)
        assert x == goal, goal


# --- when: triggers, hysteresis, pace --------------------------------------------------------------


def test_lag_over_target_sheds_with_the_drain_term_at_a_bounded_step():
    policy = one()
    # saturated (lag >= a cycle): capacity 1000; budget 0.95 * 1000 - 3000 / 30 = 850 -> goal 0.425
    d = policy.decide(obs(lag=31.0, arrival=2000.0, backlog=3000.0), 1000.0, CYCLE)
    assert (d.status, d.mode, d.budget, d.keep) == (Status.SHEDDING, Mode.SHED, 850.0, {"in": 0.5})
    assert d.streams["in"].goal == pytest.approx(0.425) and d.changes == {"in": 0.5}
    assert "lag 31.0 s > target 30 s" in d.reason
    d = policy.decide(obs(keep=0.5, lag=31.0, arrival=2000.0, backlog=3000.0), 1000.0, CYCLE)
    assert d.keep == {"in": 0.425}


def test_a_lag_rising_two_cycles_sheds_only_when_the_rates_agree():
    policy = one()
    # backlog estimated 3 s * 1200/s = 3600; budget 950 - 120 = 830 -> goal 830 / 1200
    first = policy.decide(obs(lag=3.0, trend=RISING, arrival=1200.0), 1000.0, CYCLE)
    assert (first.mode, first.status, first.changes) == (Mode.HOLD, Status.OK, {})
    second = policy.decide(obs(lag=3.0, trend=RISING, arrival=1200.0), 1000.0, CYCLE)
    assert second.mode is Mode.SHED and second.keep == {"in": round(830 / 1200, 3)}
    assert "lag rising 2 cycles" in second.reason
    # 1040/s is within 5% of the capacity: a rising lag there starts nothing, however long
    calm_rates = one()
    for _ in range(5):
        d = calm_rates.decide(obs(lag=3.0, trend=RISING, arrival=1040.0), 1000.0, CYCLE)
        assert (d.mode, d.changes) == (Mode.HOLD, {})


def test_a_backlog_that_promises_a_wait_over_target_sheds_before_the_lag_shows_it():
    # lag 20 s < 30 s, but 40000 records ahead at 1000/s: a record arriving now waits 40 s
    d = one().decide(obs(lag=20.0, arrival=1000.0, backlog=40000.0), 1000.0, CYCLE)
    assert d.mode is Mode.SHED and d.wait_s == 40.0 and "backlog waits 40.0 s" in d.reason
    # clearing 40000 in 30 s leaves less than nothing: every stream heads for its minimum, the
    # fastest drain there is (40000 / (1000 - 200) = 50 s), and that is a shed, not CANNOT_HOLD
    assert d.status is Status.SHEDDING and d.keep["in"] == 0.5 and d.streams["in"].goal == 0.2
    assert "drains in 50 s" in d.reason


def test_no_lift_until_the_lag_is_under_the_lift_threshold_and_not_rising():
    policy = one()
    policy.decide(obs(keep=0.5, lag=31.0, arrival=1000.0), 1000.0, CYCLE)  # saturated: capacity 1000
    # lag 20 s: over 30 * (1 - 0.5) = 15 s, so the shed goes on: its goal (budget 950 - 10000/30)
    # is above the keep, and a shed never raises one
    d = policy.decide(obs(keep=0.5, lag=20.0, arrival=1000.0), 1000.0, CYCLE)
    assert (d.mode, d.keep, d.status) == (Mode.SHED, {"in": 0.5}, Status.SHEDDING)
    d = policy.decide(obs(keep=0.5, lag=14.0, trend=RISING, arrival=1000.0), 1000.0, CYCLE)
    assert (d.mode, d.keep) == (Mode.HOLD, {"in": 0.5})
    # calm: budget 950 - 14 * 500 / 30 = 716.7; floor 500 -> goal 0.717; the step allows up to 1
    d = policy.decide(obs(keep=0.5, lag=14.0, trend=FALLING, arrival=1000.0), 1000.0, CYCLE)
    assert (d.mode, d.status, d.keep) == (Mode.LIFT, Status.LIFTING, {"in": 0.717})


def test_a_small_move_is_not_made_but_the_last_one_to_1_is():
    policy = one()
    # goal (950 - 0) / 2020 = 0.470, 0.03 under the keep in force: under min-change, no request
    d = policy.decide(obs(keep=0.5, lag=31.0, arrival=2020.0, backlog=0.0), 1000.0, CYCLE)
    assert d.streams["in"].goal == pytest.approx(950 / 2020) and d.changes == {}
    d = policy.decide(obs(keep=0.98, lag=0.0, arrival=500.0), 500.0, CYCLE)
    assert d.changes == {"in": 1.0} and d.status is Status.LIFTING
    d = policy.decide(obs(keep=1.0, lag=0.0, arrival=500.0), 500.0, CYCLE)
    assert (d.status, d.changes) == (Status.OK, {}) and d.reason.startswith("ok")


# --- the floor, and what cannot be held -----------------------------------------------------------


def test_when_the_minimums_exceed_the_capacity_it_says_so_and_holds_them():
    streams = [StreamDeclaration("a", 20.0, 2, 0.7), StreamDeclaration("b", 20.0, 1, 0.5)]
    policy = SheddingPolicy(PolicySettings(), streams)
    o = {t: Observation(1.0, 31.0, RISING, 900.0, 0.0) for t in ("a", "b")}
    d = policy.decide(o, 1000.0, CYCLE)
    # minimums 0.7 * 900 + 0.5 * 900 = 1080/s > 950/s; each keep goes down one step, not past its minimum
    assert d.status is Status.CANNOT_HOLD and d.minimum_load == pytest.approx(1080.0)
    assert d.keep == {"a": 0.7, "b": 0.5} and "minimum accuracies need 1080/s" in d.reason
    o = {t: Observation(k, 31.0, RISING, 900.0, 0.0) for t, k in d.keep.items()}
    d = policy.decide(o, 1000.0, CYCLE)
    assert (d.status, d.keep, d.changes) == (Status.CANNOT_HOLD, {"a": 0.7, "b": 0.5}, {})


def test_a_keep_in_force_below_the_minimum_is_raised_to_it_at_once():
    d = one(min_accuracy=0.4).decide(obs(keep=0.05, lag=20.0, arrival=1000.0), 1000.0, CYCLE)
    assert d.keep == {"in": 0.4}


def test_priority_in_one_cycle_only_the_lower_stream_sheds():
    streams = [StreamDeclaration("low", 30.0, 0, 0.2), StreamDeclaration("high", 30.0, 1, 0.5)]
    policy = SheddingPolicy(PolicySettings(), streams)
    o = {t: Observation(1.0, 31.0, FLAT, 600.0, 0.0) for t in ("low", "high")}
    d = policy.decide(o, 1000.0, CYCLE)
    # budget 950: floors 120 + 300, high takes its 300 more, low gets 0.2 + 230/600 = 0.583
    assert d.keep == {"low": 0.583, "high": 1.0} and d.changes == {"low": 0.583}


# --- capacity -------------------------------------------------------------------------------------


def test_a_throughput_measured_under_shedding_is_not_read_as_a_smaller_capacity():
    policy = one()
    policy.decide(obs(keep=0.5, lag=20.0, arrival=1200.0), 1000.0, CYCLE)  # saturated: 1000/s
    # calm at keep 0.5: the pipeline processes 600/s, all it is given; planned with 1000/s:
    # budget 950 -> goal 950 / 1200 = 0.792 (with 600/s it would be 570 < 600: no lift at all)
    d = policy.decide(obs(keep=0.5, lag=0.0, arrival=1200.0), 600.0, CYCLE)
    assert d.capacity == 1000.0 and d.keep == {"in": 0.792}


def test_a_measured_capacity_that_fits_the_whole_offered_load_lifts_to_1_at_once():
    # after an overload: keep 0.373, the input back at 700/s, a measured 1650/s; budget
    # 0.95 * 1650 - 3000 / 30 = 1467.5 holds all 700/s: straight to 1, not 0.746 first
    d = one().decide(obs(keep=0.373, lag=8.0, arrival=700.0, backlog=3000.0), 500.0, CYCLE, 1650.0)
    assert (d.mode, d.status, d.keep) == (Mode.LIFT, Status.LIFTING, {"in": 1.0})
    # a goal short of 1 still moves by the bounded step: 1000/s offered, room for 0.95 * 1000 - 100
    d = one().decide(obs(keep=0.3, lag=8.0, arrival=1000.0, backlog=3000.0), 500.0, CYCLE, 1000.0)
    assert d.streams["in"].goal == pytest.approx(0.85) and d.keep == {"in": 0.6}


def test_after_a_restart_an_unmeasured_capacity_lifts_by_steps():
    # nothing saturated seen yet: the 600/s processed is no capacity, so calm lifts one step a cycle
    d = one().decide(obs(keep=0.3, lag=0.0, arrival=1200.0), 360.0, CYCLE)
    assert (d.status, d.keep) == (Status.LIFTING, {"in": 0.6}) and math.isinf(d.budget)
    assert "not yet measured saturated" in d.reason


# --- the contract -------------------------------------------------------------------------------


def test_observations_must_match_the_declared_streams_and_be_numbers():
    policy = one()
    with pytest.raises(ValueError, match="missing"):
        policy.decide({}, 1000.0, CYCLE)
    with pytest.raises(ValueError, match="undeclared"):
        policy.decide({**obs(), "other": Observation(1.0, 0.0, FLAT, 1.0)}, 1000.0, CYCLE)
    with pytest.raises(ValueError, match="lag_s"):
        Observation(1.0, math.nan, FLAT, 1.0)
    with pytest.raises(ValueError, match="keep"):
        Observation(1.5, 0.0, FLAT, 1.0)
    with pytest.raises(ValueError, match="service_rate"):
        policy.decide(obs(), -1.0, CYCLE)
    with pytest.raises(ValueError, match="cycle_s"):
        policy.decide(obs(), 1.0, 0.0)
    with pytest.raises(ValueError):
        Observation(1.0, 0.0, "sideways", 1.0)
    with pytest.raises(ValueError, match="twice"):
        SheddingPolicy(PolicySettings(), [StreamDeclaration("a", 1.0), StreamDeclaration("a", 2.0)])
