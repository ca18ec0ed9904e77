"""The paired forecast-vs-last comparison: its interval, its verdict, and the seed list it runs on."""

from __future__ import annotations

import math

import pytest

from bench.controller.main import extra_policies, parse_seeds
from bench.controller.paired import paired, t975

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("df", "exact"),
    [(1, 12.706), (4, 2.776), (29, 2.045), (31, 2.040), (40, 2.021), (60, 2.000), (120, 1.980)],
)
def test_the_t_quantile_matches_the_tables(df, exact):
    assert t975(df) == pytest.approx(exact, abs=0.0015)


def test_consistent_gains_are_ahead_and_losses_behind():
    base = [1.50, 1.60, 1.55, 1.70, 1.65]
    assert paired([b - 0.02 for b in base], base).verdict == "ahead"
    assert paired([b + 0.02 for b in base], base).verdict == "behind"


def test_mixed_small_differences_are_level_even_when_most_seeds_win():
    base = [1.50, 1.60, 1.55, 1.70, 1.65]
    diffs = [-0.002, -0.001, -0.003, +0.010, -0.001]  # 4 of 5 won, one loss larger than the gains
    p = paired([b + d for b, d in zip(base, diffs, strict=True)], base)
    assert p.won == 4 and p.seeds == 5
    assert p.mean == pytest.approx(sum(diffs) / 5)
    assert p.verdict == "level"


def test_the_interval_is_the_student_t_one():
    diffs = [0.01, -0.02, 0.03, 0.0]
    p = paired(diffs, [0.0] * 4)
    mean = sum(diffs) / 4
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / 3)
    assert p.half_width == pytest.approx(3.182 * sd / 2)


def test_one_seed_has_no_interval_and_mismatched_lists_are_refused():
    assert math.isnan(paired([1.1], [1.2]).half_width)
    assert paired([1.1], [1.2]).verdict == "ahead"
    with pytest.raises(ValueError):
        paired([1.0, 1.1], [1.0])
    with pytest.raises(ValueError):
        paired([], [])


def test_seeds_take_lists_and_ranges_once_each_in_order():
    assert parse_seeds("11-13,15,12") == [11, 12, 13, 15]
    assert parse_seeds("7") == [7]
    with pytest.raises(SystemExit):
        parse_seeds("13-11")
    with pytest.raises(SystemExit):
        parse_seeds(",")


def test_the_exact_mean_runs_on_the_boundary_swaps_only_and_only_with_the_variants():
    assert "expected" in extra_policies("swaps", "every", ["ewma-0.5"])
    assert "expected" not in extra_policies("swaps-fade", "every", ["ewma-0.5"])
    assert extra_policies("swaps", "default", ["ewma-0.5"]) == []
    assert extra_policies("swaps", "every", []) == []
