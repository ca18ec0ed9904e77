"""The busy-time rule DS2 is compared with: Flink's autoscaler's estimate, its band and its caps."""

from __future__ import annotations

import pytest

from services.controller.scaling.busy_time import BusySettings, StageLoad, busy_time_instances

pytestmark = pytest.mark.unit


def test_figure_4_2_by_busy_time_provisions_for_a_utilization_of_0_7() -> None:
    stages = [
        StageLoad("src", source_rate=40.0),
        StageLoad("o1", 1, input_rate=10.0, output_rate=100.0, busy_max=1.0, upstream=("src",)),
        StageLoad("o2", 1, input_rate=100.0, output_rate=100.0, busy_max=0.5, upstream=("o1",)),
    ]
    got = busy_time_instances(stages)
    # o1: capacity 40 / 0.7 = 57.1 against a TPR of 10: x5.71, 6 instances (DS2 says 4)
    # o2: target 400, capacity 571 against a TPR of 200: 3 instances (DS2 says 2)
    assert (got["o1"].optimal, got["o2"].optimal) == (6, 3)


def test_inside_the_band_nothing_changes() -> None:
    stages = [StageLoad("src", source_rate=100.0), StageLoad("op", 4, 100.0, 100.0, 0.6, ("src",))]
    got = busy_time_instances(stages)["op"]  # TPR 166.7 within [100, 250]
    assert got.optimal == 4 and "kept" in got.reason


def test_a_scale_down_is_capped_at_the_max_factor() -> None:
    stages = [StageLoad("src", source_rate=10.0), StageLoad("op", 10, 10.0, 10.0, 0.01, ("src",))]
    assert busy_time_instances(stages)["op"].optimal == 4  # x0.014 asked, x0.4 allowed


def test_the_busiest_instance_sets_the_rate_so_skew_asks_for_more() -> None:
    skewed = [StageLoad("src", source_rate=40.0), StageLoad("op", 2, 30.0, 30.0, 1.0, ("src",))]
    even = [StageLoad("src", source_rate=40.0), StageLoad("op", 2, 30.0, 30.0, 0.6, ("src",))]
    assert busy_time_instances(skewed)["op"].optimal > busy_time_instances(even)["op"].optimal


def test_an_idle_stage_keeps_its_count_and_bad_settings_are_refused() -> None:
    stages = [StageLoad("src", source_rate=5.0), StageLoad("op", 3, 0.0, 0.0, 0.0, ("src",))]
    assert busy_time_instances(stages)["op"].optimal == 3
    with pytest.raises(ValueError):
        BusySettings(utilization=0.3, boundary=0.3)
