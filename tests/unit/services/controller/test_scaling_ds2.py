"""DS2's one-pass model against the thesis's worked examples, and the decisions it leaves open."""

from __future__ import annotations

import pytest

from services.controller.scaling.ds2 import InstanceWindow, Stage, optimal_instances, source_target

pytestmark = pytest.mark.unit


def busy(
    pulled_per_s: float, pushed_per_s: float, useful: float = 1.0, window: float = 1.0
) -> InstanceWindow:
    """An instance that ran at these *true* rates for ``useful`` of ``window`` seconds."""
    return InstanceWindow(round(pulled_per_s * useful), round(pushed_per_s * useful), useful, window)


def test_figure_4_2_the_bottleneck_to_four_and_its_consumer_doubled() -> None:
    # target 40/s; o1's true rate is 10/s (it is the bottleneck, busy all the time, selectivity 10);
    # o2 is observed at 100/s but is busy half the time: its true rate is 200/s
    stages = [
        Stage("src", source_rate=40.0),
        Stage("o1", (busy(10, 100),), upstream=("src",)),
        Stage("o2", (busy(200, 200, useful=0.5),), upstream=("o1",)),
    ]
    got = optimal_instances(stages)
    assert (got["o1"].optimal, got["o2"].optimal) == (4, 2)
    assert got["o2"].target_rate == pytest.approx(400.0)


def test_dhalion_word_count_flatmap_10_and_count_20_in_one_decision_from_1_and_1() -> None:
    per_min = 1 / 60
    stages = [
        Stage("sentences", source_rate=1e6 * per_min),
        # FlatMap: 100 k sentences/min per instance, ~20 words a sentence; saturated at 1 instance
        Stage(
            "flatmap", (busy(1e5 * per_min, 2e6 * per_min, useful=60, window=60),), upstream=("sentences",)
        ),
        # Count: 1 M words/min per instance, fed 2 M words/min at its input's cap: saturated too
        Stage("count", (busy(1e6 * per_min, 1e6 * per_min, useful=60, window=60),), upstream=("flatmap",)),
    ]
    got = optimal_instances(stages)
    assert (got["flatmap"].optimal, got["count"].optimal) == (10, 20)


def test_a_multi_input_stage_sums_its_upstream_targets_and_selectivity_carries_on() -> None:
    stages = [
        Stage("a", source_rate=30.0),
        Stage("b", source_rate=50.0),
        Stage("join", (busy(20, 10), busy(20, 10)), upstream=("a", "b")),
        Stage("sink", (busy(100, 0),), upstream=("join",)),
    ]
    got = optimal_instances(stages)
    assert got["join"].target_rate == 80.0 and got["join"].optimal == 4
    assert got["sink"].target_rate == pytest.approx(40.0) and got["sink"].optimal == 1


def test_an_idle_stage_keeps_its_count_and_passes_its_target_on() -> None:
    stages = [
        Stage("src", source_rate=100.0),
        Stage("idle", (InstanceWindow(0, 0, 0.0, 10.0),) * 3, upstream=("src",)),
        Stage("next", (busy(50, 50),), upstream=("idle",)),
    ]
    got = optimal_instances(stages)
    assert got["idle"].optimal == 3 and "no useful work" in got["idle"].reason
    assert got["next"].optimal == 2


def test_counts_are_clamped_to_the_partitions_and_say_so() -> None:
    stages = [Stage("src", source_rate=1000.0), Stage("reduce", (busy(10, 10),), ("src",), max_instances=8)]
    got = optimal_instances(stages)["reduce"]
    assert got.optimal == 8 and got.capped and got.output_target == pytest.approx(80.0)


def test_float_error_does_not_add_an_instance() -> None:
    stages = [
        Stage("src", source_rate=0.1 + 0.2),
        Stage("op", (busy(0.1, 0.1, useful=10, window=10),), ("src",)),
    ]
    # 0.30000000000000004 / 0.1 is 3.0000000000000004: still 3
    assert optimal_instances(stages)["op"].optimal == 3


def test_bad_reports_and_orders_are_refused() -> None:
    with pytest.raises(ValueError, match="exceeds"):
        InstanceWindow(10, 10, 2.0, 1.0)
    with pytest.raises(ValueError, match="topological"):
        optimal_instances([Stage("op", (busy(1, 1),), ("src",)), Stage("src", source_rate=1.0)])


def test_the_catch_up_term_works_off_the_backlog_in_its_time() -> None:
    assert source_target(1000.0, 60_000, 120.0) == 1500.0
    with pytest.raises(ValueError):
        source_target(1.0, 1.0, 0.0)
