"""A router whose report lands an interval late still counts in the interval it missed."""

from __future__ import annotations

import pytest

from services.controller.interval_load import fold_interval, router_weights
from services.controller.router_reports import RouterReports
from tests.support.metric_records import router_stats as report

pytestmark = pytest.mark.unit

ROUTE = {b"a": 0, b"b": 1}.__getitem__


def imbalance(reports) -> float:
    weights = router_weights([(r, span) for r, span, _ in reports], 3000)
    return fold_interval([body for _, _, body in reports], [], ROUTE, 2, "records", weights).imbalance


def test_a_late_routers_latest_report_stands_in_and_the_interval_stays_balanced():
    """r1 feeds worker 0 and r2 worker 1, 300 records per 3 s interval each. In the second interval
    r2's report is late: without the stand-in worker 1 looks idle (max/mean 2.0) and a plan would
    move half the keys; with it the interval is as balanced as it is."""
    reports = RouterReports(grace=2)
    reports.add("r1", 3000, report([300, 0], {"a": 300}))
    reports.add("r2", 3000, report([0, 300], {"b": 300}))
    first, late = reports.end_interval()
    assert late == [] and imbalance(first) == 1.0
    reports.add("r1", 3000, report([300, 0], {"a": 300}))
    second, late = reports.end_interval()
    assert late == ["r2"] and imbalance(second) == 1.0
    assert imbalance([r for r in second if r[0] == "r1"]) == 2.0  # what the interval alone says
    # r2's late report arrives with its next one: weighted to one interval's worth, not double
    reports.add("r1", 3000, report([300, 0], {"a": 300}))
    reports.add("r2", 3000, report([0, 300], {"b": 300}))
    reports.add("r2", 3000, report([0, 300], {"b": 300}))
    third, late = reports.end_interval()
    assert late == [] and len(third) == 3 and imbalance(third) == 1.0


def test_a_router_silent_longer_than_the_grace_stops_counting():
    reports = RouterReports(grace=2)
    reports.add("r1", 3000, report([300, 0], {"a": 300}))
    reports.add("r2", 3000, report([0, 300], {"b": 300}))
    reports.end_interval()
    seen = []
    for _ in range(4):
        reports.add("r1", 3000, report([300, 0], {"a": 300}))
        seen.append(reports.end_interval()[1])
    assert seen == [["r2"], ["r2"], [], []]  # stood in for two intervals, then gone (scaled down)


def test_no_stand_ins_in_an_interval_without_any_report_and_none_with_grace_zero():
    reports = RouterReports(grace=2)
    reports.add("r1", 3000, report([300, 0], {"a": 300}))
    reports.end_interval()
    assert reports.end_interval() == ([], [])  # nothing flowing: nothing to plan
    never = RouterReports(grace=0)
    never.add("r1", 3000, report([300, 0], {"a": 300}))
    never.add("r2", 3000, report([0, 300], {"b": 300}))
    never.end_interval()
    never.add("r1", 3000, report([300, 0], {"a": 300}))
    assert never.end_interval()[1] == []
