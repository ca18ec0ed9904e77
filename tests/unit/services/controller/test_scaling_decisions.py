"""DS2's decisions over time: activation, warm-up, the scale-down delay and its drop, the shedder."""

from __future__ import annotations

import pytest

from services.controller.scaling.decisions import Decider, DecisionSettings
from services.controller.scaling.ds2 import Estimate

pytestmark = pytest.mark.unit


def est(optimal: int, current: int = 0, stage: str = "reduce") -> dict[str, Estimate]:
    return {stage: Estimate(stage, current, optimal, 0.0, None, 1.0, 0.0, False, "")}


def run(decider: Decider, optimals: list[int], start: float = 0.0, step: float = 10.0, **kw) -> list:
    out = []
    for i, o in enumerate(optimals):
        out += [(i, d.after) for d in decider.evaluate(start + i * step, est(o), **kw)]
    return out


def test_a_scale_up_needs_activation_estimates_and_takes_their_lower_median() -> None:
    d = Decider(DecisionSettings(warmup=0, activation=3), {"reduce": 2})
    assert run(d, [9, 4, 5]) == [(2, 5)], "one spiky estimate must neither trigger nor size the scale-up"
    assert d.counts["reduce"] == 5


def test_one_estimate_at_or_below_the_count_resets_the_activation() -> None:
    d = Decider(DecisionSettings(warmup=0, activation=3), {"reduce": 2})
    assert run(d, [4, 4, 2, 4, 4]) == []
    assert run(d, [4], start=50) == [(0, 4)]


def test_warm_up_ignores_evaluations_after_an_action() -> None:
    d = Decider(DecisionSettings(warmup=2, activation=1), {"reduce": 1})
    assert run(d, [3, 9, 9, 9]) == [(0, 3), (3, 9)]


def test_a_scale_down_waits_the_delay_needs_a_real_drop_and_takes_the_max() -> None:
    d = Decider(
        DecisionSettings(warmup=0, activation=1, scale_down_delay_s=60, scale_down_min_drop=2), {"reduce": 8}
    )
    assert run(d, [7, 7, 7, 7, 7, 7, 7, 7]) == [], "a drop of one is flapping, never a scale-down"
    got = run(d, [4, 3, 5, 3, 4, 4, 3, 3], start=100)
    assert got == [(6, 5)], f"60 s of estimates at least 2 below, then their max: {got}"


def test_no_scale_down_while_the_shedder_sheds_and_its_history_is_cleared() -> None:
    d = Decider(DecisionSettings(warmup=0, activation=1, scale_down_delay_s=30), {"reduce": 8})
    assert run(d, [2, 2, 2], shedding=False) == []
    assert run(d, [2], start=30, shedding=True) == []
    assert run(d, [2, 2, 2], start=40) == [], "the delay starts over after shedding"
    assert run(d, [2], start=70) == [(0, 2)]


def test_a_scale_up_clears_a_pending_scale_down() -> None:
    d = Decider(DecisionSettings(warmup=0, activation=1, scale_down_delay_s=30), {"reduce": 4})
    assert run(d, [1, 1, 6]) == [(2, 6)]
    assert run(d, [1, 1, 1], start=30) == [], "the delay counts from after the scale-up"


def test_a_step_never_revisits_a_count() -> None:
    """Noisy estimates around a need of 6 from 2: up once or twice, never down again within a step."""
    d = Decider(DecisionSettings(warmup=1, activation=3, scale_down_delay_s=300), {"reduce": 2})
    noisy = [5, 7, 6, 6, 5, 7, 6, 6, 7, 5, 6, 6, 7, 6, 5, 6]
    counts = [2] + [after for _i, after in run(d, noisy)]
    assert counts == sorted(counts) and len(set(counts)) == len(counts), counts
    assert counts[-1] >= 6 and len(counts) - 1 <= 3


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError):
        DecisionSettings(activation=0)


def test_at_small_counts_a_quarter_is_a_real_drop() -> None:
    d = Decider(DecisionSettings(warmup=0, activation=1, scale_down_delay_s=20), {"reduce": 2})
    assert run(d, [1, 1, 1]) == [(2, 1)], "2 -> 1 halves the count: not flapping"
    d = Decider(DecisionSettings(warmup=0, activation=1, scale_down_delay_s=20), {"reduce": 10})
    assert run(d, [9, 9, 9, 9]) == [], "10 -> 9 is a tenth: flapping"
