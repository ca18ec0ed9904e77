"""The suite's lanes (tests/support/lanes.py): the saturating modules share one unit, run first,
those whose checks ride on timing last in it."""

from __future__ import annotations

from tests.support.lanes import SATURATING, lane_of, run_order


def test_the_saturating_modules_share_one_unit_and_the_others_are_one_each() -> None:
    assert lane_of("tests/e2e/test_chaos.py::test_x") == SATURATING
    assert lane_of("tests/e2e/test_demo.py::test_y") == SATURATING
    # a reduce paying 4 ms a row on 8 task slots and paced input: beside another pipeline, its
    # scaling decisions came from a machine it did not have
    assert lane_of("tests/e2e/test_scaling.py::test_s") == SATURATING
    assert lane_of("tests/e2e/test_package.py::test_z") == "tests/e2e/test_package.py"
    assert lane_of("tests/unit/a/test_codec.py::test_round_trip[x::y]") == "tests/unit/a/test_codec.py"


def test_the_saturating_lane_runs_first_and_unit_tests_last() -> None:
    ids = ["tests/unit/test_a.py::t", "tests/e2e/test_package.py::t", "tests/integration/x/test_b.py::t",
           "tests/e2e/test_reduce.py::t"]  # fmt: skip
    assert sorted(ids, key=run_order) == [ids[3], ids[2], ids[1], ids[0]]


def test_the_lanes_timing_sensitive_modules_run_last_in_it() -> None:
    ids = ["tests/e2e/test_demo.py::a", "tests/e2e/test_controller.py::b", "tests/e2e/test_chaos.py::c",
           "tests/e2e/test_demo.py::d", "tests/e2e/test_three_hosts.py::e",
           "tests/e2e/test_scaling.py::f"]  # fmt: skip
    assert sorted(ids, key=run_order) == [ids[2], ids[4], ids[5], ids[1], ids[0], ids[3]]
