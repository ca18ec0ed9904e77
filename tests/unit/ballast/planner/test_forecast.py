"""The next-interval forecast: hand-computed cases, and an independent per-key reimplementation."""

from __future__ import annotations

import numpy as np
import pytest

from ballast.planner.forecast import ForecastSettings, LoadForecaster, next_interval

pytestmark = pytest.mark.unit

S = ForecastSettings(cap_at_heaviest=False)  # the rule alone; the cap has tests of its own


def test_next_interval_rule_by_hand():
    last = np.array([10.0, 10.0, 10.0, 0.0, 10.0, 10.0, 10.0])
    change = np.array([4.0, -4.0, 4.0, 0.0, -15.0, 4.0, 4.0])
    before = np.array([0.0, 0.0, 4.0, 0.0, 0.0, -3.0, 1.9])
    # fresh rise: 14; fresh fall: 6; rise under way (4 >= 0.5*4): 10; nothing: 0;
    # fresh fall past zero: floored at 0; after a fall, a rise is fresh: 14; 1.9 < 2: fresh: 14.
    assert next_interval(last, change, before, S).tolist() == [14.0, 6.0, 10.0, 0.0, 0.0, 14.0, 14.0]
    # just above the freshness bound (2.1 >= 0.5 * 4): not fresh
    assert next_interval(np.array([10.0]), np.array([4.0]), np.array([2.1]), S).tolist() == [10.0]


def test_follow_scales_the_headroom():
    half = ForecastSettings(follow=0.5, cap_at_heaviest=False)
    got = next_interval(np.array([10.0]), np.array([4.0]), np.array([0.0]), half)
    assert got.tolist() == [12.0]
    got = next_interval(np.array([10.0]), np.array([4.0]), np.array([0.0]), ForecastSettings(follow=0.0))
    assert got.tolist() == [10.0]


def test_no_extrapolation_past_the_heaviest_key_of_the_interval():
    capped = ForecastSettings()
    last = np.array([10.0, 30.0, 40.0, 50.0])
    change = np.array([8.0, 25.0, -5.0, 0.0])
    before = np.zeros(4)
    # uncapped: 18, 55, 35, 50; the heaviest measured is 50: 55 -> 50
    assert next_interval(last, change, before, capped).tolist() == [18.0, 50.0, 35.0, 50.0]
    # the heaviest key itself is never extrapolated upwards (nothing measured is heavier)
    assert next_interval(np.array([50.0, 5.0]), np.array([20.0, 0.0]), np.zeros(2), capped).tolist() == [
        50.0, 5.0]
    # a key measured above the rest keeps its measured value when falling
    assert next_interval(np.array([50.0, 5.0]), np.array([-20.0, 0.0]), np.zeros(2), capped).tolist() == [
        30.0, 5.0]
    assert next_interval(np.zeros(0), np.zeros(0), np.zeros(0), capped).tolist() == []


def test_first_interval_has_no_history_so_the_forecast_is_the_interval():
    f = LoadForecaster()
    f.observe(["a", "b"], [5.0, 7.0])
    assert f.predict(["a", "b"]).tolist() == [5.0, 7.0]


def test_a_step_in_the_middle_of_an_interval():
    # The rate goes 10 -> 20 half way through interval 2: intervals read 10, 10, 15, 20, 20.
    # After 15: a fresh change of 5, forecast 20 (right). After 20: the change (5) is no longer
    # fresh (the one before was 5 too): forecast 20, not 25. After the second 20: 20.
    f = LoadForecaster(S)
    got = []
    for y in (10.0, 10.0, 15.0, 20.0, 20.0):
        f.observe(["k"], [y])
        got.append(float(f.predict(["k"])[0]))
    assert got == [10.0, 10.0, 20.0, 20.0, 20.0]


def test_a_key_that_vanishes_decays_and_is_forgotten():
    f = LoadForecaster(ForecastSettings(vanish_decay=0.5, forget_below=0.01))
    f.observe(["a", "b"], [100.0, 8.0])
    f.observe(["a"], [100.0])
    assert f.predict(["b"]).tolist() == [4.0]
    f.observe(["a"], [100.0])
    assert f.predict(["b"]).tolist() == [2.0]
    f.observe(["a"], [100.0])  # 1.0 >= 0.01 * 100: kept
    assert f.predict(["b"]).tolist() == [1.0]
    f.observe(["a"], [100.0])  # 0.5 < 1.0: forgotten
    assert "b" not in f.keys and f.predict(["b"]).tolist() == [0.0]


def test_a_key_that_reappears_changes_from_its_decayed_value():
    f = LoadForecaster(ForecastSettings(vanish_decay=0.5))
    f.observe(["a", "b"], [10.0, 8.0])
    f.observe(["a"], [10.0])  # b decays to 4, no change
    f.observe(["a", "b"], [10.0, 6.0])  # b: change 6 - 4 = 2, before it 0: fresh -> 8
    assert f.predict(["b"]).tolist() == [8.0]


def test_a_key_new_after_the_first_interval_rises_from_zero():
    f = LoadForecaster()
    f.observe(["a"], [10.0])
    f.observe(["a", "c"], [10.0, 3.0])
    assert f.predict(["a", "c", "never"]).tolist() == [10.0, 6.0, 0.0]


def test_forecast_lists_every_tracked_key_once():
    f = LoadForecaster(S)
    f.observe(["a", "b"], [1.0, 2.0])
    f.observe(["c", "a"], [3.0, 1.0])
    keys, values = f.forecast()
    assert sorted(keys) == ["a", "b", "c"] and len(values) == 3
    assert dict(zip(keys, values.tolist(), strict=True)) == {"c": 6.0, "a": 1.0, "b": 1.0}


def reference(series: list[dict[str, float]], s: ForecastSettings) -> dict[str, float]:
    """A per-key, plain-Python rendering of the rule, written from the module docstring."""
    hist: dict[str, list[float]] = {}  # key -> [last, change, change before]
    for t, obs in enumerate(series):
        total = sum(obs.values())
        for k in list(hist):
            if k not in obs:
                last = hist[k][0] * s.vanish_decay
                if last < s.forget_below * total:
                    del hist[k]
                else:
                    hist[k] = [last, 0.0, 0.0]
        for k, y in obs.items():
            if t == 0:
                hist[k] = [y, 0.0, 0.0]
            else:
                last, change, _ = hist.get(k, [0.0, 0.0, 0.0])
                hist[k] = [y, y - last, change]
    out = {}
    heaviest = max((h[0] for h in hist.values()), default=0.0)
    for k, (y, d, dp) in hist.items():
        fresh = abs(dp) < s.fresh * abs(d) or (dp > 0) != (d > 0) or (dp < 0) != (d < 0)
        out[k] = max(0.0, y + (s.follow * d if fresh else 0.0))
        if s.cap_at_heaviest:
            out[k] = min(out[k], max(y, heaviest))
    return out


@pytest.mark.parametrize("cap", [True, False])
def test_matches_an_independent_per_key_implementation_on_a_random_series(cap):
    rng = np.random.default_rng(5)
    s = ForecastSettings(forget_below=1e-3, cap_at_heaviest=cap, calibrate=False)  # the rule alone
    universe = [f"k{i}" for i in range(40)]
    series = []
    for _ in range(12):
        present = [k for k in universe if rng.random() < 0.7]
        series.append({k: float(rng.choice([0.0, rng.integers(1, 50)])) for k in present})
    f = LoadForecaster(s)
    for obs in series:
        f.observe(list(obs), list(obs.values()))
    want = reference(series, s)
    keys, values = f.forecast()
    assert dict(zip(keys, values.tolist(), strict=True)) == pytest.approx(want)


def test_the_same_key_tuple_every_interval_gives_what_fresh_lists_give():
    rng = np.random.default_rng(9)
    keys = tuple(range(50))
    a, b = LoadForecaster(), LoadForecaster()
    for _ in range(6):
        y = rng.integers(0, 100, 50).astype(float)
        a.observe(keys, y)  # the same tuple object each time: no lookups
        b.observe(list(keys), y)
    assert np.array_equal(a.predict(list(keys)), b.predict(list(keys)))


@pytest.mark.parametrize(
    ("keys", "loads"),
    [(["a", "a"], [1.0, 2.0]), (["a"], [-1.0]), (["a"], [float("nan")]), (["a"], [1.0, 2.0])],
)
def test_bad_observations_are_refused(keys, loads):
    with pytest.raises(ValueError):
        LoadForecaster().observe(keys, loads)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"follow": -1},
        {"fresh": -0.1},
        {"vanish_decay": 1.5},
        {"forget_below": -1},
        {"calibration_memory": 1.0},
        {"calibration_memory": -0.1},
    ],
)
def test_settings_are_checked(kwargs):
    with pytest.raises(ValueError):
        ForecastSettings(**kwargs)


# --- calibration: changes measured to revert ------------------------------------------------------

FLIPS = [10.0, 20.0, 10.0, 20.0, 10.0, 20.0]  # every change fresh (the sign flips), every one reverted


def test_changes_that_revert_are_measured_and_followed():
    f = LoadForecaster(ForecastSettings(cap_at_heaviest=False))
    seen = []
    for y in FLIPS:
        f.observe(["a", "b"], [y, 15.0])
        seen.append((f.continuation, f.predict(["a", "b"]).tolist()))
    assert seen[0] == (None, [10.0, 15.0])  # no history: nothing extrapolated, nothing judged
    assert seen[1] == (None, [30.0, 15.0])  # a fresh rise extrapolated once, not judged yet
    # the rise of 10 reverted by 10: continuation -1, so the forecast is the flip, not 10 - 10
    assert seen[2][0] == pytest.approx(-1.0) and seen[2][1] == pytest.approx([20.0, 15.0])
    assert [c for c, _ in seen[2:]] == pytest.approx([-1.0] * 4)
    assert seen[-1][1] == pytest.approx([10.0, 15.0])


def test_without_calibration_the_rule_extrapolates_regardless():
    f = LoadForecaster(ForecastSettings(cap_at_heaviest=False, calibrate=False))
    for y in FLIPS:
        f.observe(["a"], [y])
    assert f.continuation == pytest.approx(-1.0)  # measured all the same
    assert f.predict(["a"]).tolist() == [30.0]  # 20 + the fresh change once more


def test_a_change_that_comes_as_a_step_is_judged_not_continued_and_memory_fades_it():
    # a step on a boundary: 10 -> 20, then flat. The extrapolation to 30 met no change (phi 0):
    # the rule stays (only reverting changes are followed), and a later judged rise raises phi
    memory = 0.5
    f = LoadForecaster(ForecastSettings(cap_at_heaviest=False, calibration_memory=memory))
    for y in (10.0, 20.0, 20.0):
        f.observe(["a"], [y])
    assert f.continuation == pytest.approx(0.0)
    for y in (20.0, 25.0, 30.0):  # a fresh rise of 5 (extrapolated to 30) that came in full
        f.observe(["a"], [y])
    # judged: 10 -> 0 came (three intervals ago), then 5 -> 5: (0 + 5 * 5) / (memory^3 * 10^2 + 5^2),
    # the flat step's verdict weighing less each interval
    assert f.continuation == pytest.approx(25.0 / (memory**3 * 100.0 + 25.0))


def test_continuing_changes_leave_the_rule_alone():
    rng = np.random.default_rng(3)
    keys = [f"k{i}" for i in range(30)]
    level = rng.uniform(5, 50, 30)
    calibrated, plain = LoadForecaster(), LoadForecaster(ForecastSettings(calibrate=False))
    for t in range(12):  # each interval a third of the keys start a step half-way through
        stepping = rng.random(30) < 1 / 3
        target = np.where(stepping, level * rng.uniform(0.5, 2.0, 30), level)
        shown = np.where(stepping, (level + target) / 2, level)
        for f in (calibrated, plain):
            f.observe(keys, shown if t else level)
        level = target
    assert calibrated.continuation is not None and calibrated.continuation > 0
    assert np.array_equal(calibrated.predict(keys), plain.predict(keys))
