"""The rebalance trigger: K intervals in a row above 1 + theta, a gap, and no flapping at the threshold."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from ballast.planner.trigger import TriggerSettings, TriggerState, observe

pytestmark = pytest.mark.unit


def fires(ratios, settings: TriggerSettings) -> list[int]:
    """The intervals after which the trigger says rebalance."""
    state, out = TriggerState(), []
    for t, r in enumerate(ratios):
        d = observe(state, float(r), settings)
        state = d.state
        if d.rebalance:
            out.append(t)
    return out


def test_fires_after_k_consecutive_intervals_above():
    s = TriggerSettings(theta=0.1, consecutive=3, min_gap=1)
    #          0    1    2    3    4    5    6    7
    ratios = [1.2, 1.2, 1.0, 1.2, 1.2, 1.2, 1.0, 1.0]
    assert fires(ratios, s) == [5]  # the first run of three ends at interval 5


def test_sustained_imbalance_fires_once_per_gap():
    # K = 2, gap = 3, imbalanced throughout: 2 intervals to fire (t=1); afterwards the streak
    # restarts (t=2, 3) but the gap holds until 3 intervals have passed (t=4): 1, 4, 7, 10.
    s = TriggerSettings(theta=0.15, consecutive=2, min_gap=3)
    assert fires([2.0] * 12, s) == [1, 4, 7, 10]


def test_defaults_are_the_documented_ones():
    s = TriggerSettings()
    assert (s.theta, s.consecutive, s.min_gap) == (0.15, 2, 3)


def test_a_load_exactly_at_the_threshold_never_fires():
    s = TriggerSettings()
    limit = 1.0 + s.theta
    assert fires([limit] * 200, s) == []
    # and the same load computed as max/mean of worker loads (rounding must not tip it over)
    loads = np.array([1.15, 0.85, 1.0, 1.0])
    ratio = float(loads.max() / loads.mean())
    assert fires([ratio] * 200, s) == []


def test_a_load_alternating_around_the_threshold_never_fires_with_the_defaults():
    s = TriggerSettings()
    limit = 1.0 + s.theta
    ratios = [limit + 0.05 if t % 2 == 0 else limit - 0.05 for t in range(200)]
    assert fires(ratios, s) == []


def test_noise_at_the_threshold_is_bounded_by_the_gap_and_the_streak():
    s = TriggerSettings()
    rng = np.random.default_rng(3)
    ratios = 1.0 + s.theta + rng.normal(0.0, 0.03, 400)
    got = fires(ratios, s)
    limit = 1.0 + s.theta
    # Independent check of every rebalance: the K intervals before it were above, and it is at
    # least min_gap after the previous one; and no more than one rebalance per min_gap intervals.
    for t in got:
        assert all(ratios[t - i] > limit for i in range(s.consecutive))
    assert all(b - a >= s.min_gap for a, b in itertools.pairwise(got))
    assert len(got) <= len(ratios) // s.min_gap
    # a K=1, gap=1 trigger (the paper's) fires on every interval above: about half of them
    naive = fires(ratios, TriggerSettings(theta=s.theta, consecutive=1, min_gap=1))
    assert len(naive) == int(np.sum(ratios > limit))
    assert len(got) < len(naive) / 2


def test_closed_loop_a_rebalanced_load_creeping_back_is_rebalanced_only_when_over_again():
    # A rebalance brings max/mean to 1.08 (the planner's tolerance); it then creeps up by 0.02
    # per interval. Hand-computed: 1.08, 1.10, ..., above 1.15 from 1.16 (4 intervals after the
    # rebalance), fires on the second interval above (5 after).
    s = TriggerSettings()
    state, ratio, history = TriggerState(), 2.0, []
    for t in range(30):
        d = observe(state, ratio, s)
        state = d.state
        if d.rebalance:
            history.append(t)
            ratio = 1.08
        else:
            ratio = ratio + 0.02 if ratio < 2.0 else ratio
    # first fire at t=1 (2.0 for two intervals); then ratio at t=2..: 1.08, 1.10, 1.12, 1.14,
    # 1.16 (t=6, first above), 1.18 (t=7, second above) -> fires at 7, then 13, 19, 25.
    assert history == [1, 7, 13, 19, 25]


def test_nan_counts_as_not_above_and_breaks_the_streak():
    s = TriggerSettings(theta=0.1, consecutive=2, min_gap=1)
    assert fires([1.5, float("nan"), 1.5, float("nan"), 1.5], s) == []


def test_reason_says_why():
    s = TriggerSettings(theta=0.1, consecutive=2, min_gap=1)
    d = observe(TriggerState(), 1.3, s)
    assert not d.rebalance and "1 of 2" in d.reason
    d = observe(d.state, 1.3, s)
    assert d.rebalance and "for 2 intervals" in d.reason


@pytest.mark.parametrize("kwargs", [{"theta": -0.1}, {"consecutive": 0}, {"min_gap": 0}])
def test_settings_are_checked(kwargs):
    with pytest.raises(ValueError):
        TriggerSettings(**kwargs)


def test_a_busy_caller_holds_the_trigger_instead_of_spending_it():
    """While a migration is in flight the controller cannot act: the trigger must not reset as if it
    had rebalanced (that cost K more intervals, and the gap, after the migration ended)."""
    s = TriggerSettings(theta=0.15, consecutive=2, min_gap=3)
    state = TriggerState()
    decisions = []
    for t in range(6):
        d = observe(state, 2.0, s, busy=t < 3)  # a migration in flight through interval 2
        state = d.state
        decisions.append(d.rebalance)
    assert decisions == [False, False, False, True, False, False]  # fires at the first free interval
    held = observe(TriggerState(1, None), 2.0, s, busy=True)
    assert not held.rebalance and held.state == TriggerState(2, None) and "in flight" in held.reason
    assert not observe(TriggerState(), 1.1, s, busy=True).rebalance  # below: nothing to hold
