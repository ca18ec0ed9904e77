"""The service's pure parts: the tracker, the streams' observations, the keeps in force and their request
ids, and ``ballast lag``'s report. Expected values are worked out by hand from the inputs."""

from __future__ import annotations

import math

import pytest

from ballast.metrics.records import LagSample, Metric
from services.shedder.config import StreamDeclaration
from services.shedder.keeps import KeepsInForce, request_id
from services.shedder.lag_report import format_table, group_reports
from services.shedder.lag_status import Status, StatusRules
from services.shedder.observations import observe_streams, trend_of
from services.shedder.policy import Trend
from services.shedder.tracker import REDUCE, ROUTER, LagTracker


def feed(tracker: LagTracker, t: float, end: int, committed: int | None, group: str = "g"):
    tracker.observe_ends(t, {("in", 0): end})
    return tracker.observe_group(group, ROUTER, t, {("in", 0): committed})


def test_tracker_turns_offsets_into_time_and_rates():
    # 100 records/s appended from t=0; the group reads 50/s: at t=10 it is at offset 500, the record
    # appended when the end reached 501, at t=5.01, so its lag is 4.99 s and 500 records
    tracker = LagTracker(StatusRules(window=3), tau_s=1.0)
    for t in range(11):
        g = feed(tracker, float(t), 100 * t, 50 * t)
    p = g.partitions[0]
    assert p.lag_seconds == pytest.approx(5.0 - 0.01) and p.lag_records == 500
    assert p.arrival_rate == pytest.approx(100.0) and p.service_rate == pytest.approx(50.0)
    assert g.rated and g.status is Status.WARN  # behind, and the lag rose every evaluation


def test_tracker_measures_rates_only_over_long_enough_intervals():
    # commits every 2 s (the offset moves in steps); samples every 0.5 s. Over 0.5 s intervals the
    # first rate would be a zero or a burst; with a 2 s minimum interval it is the true 100/s
    tracker = LagTracker(tau_s=100.0, rate_interval_s=2.0)
    g = None
    for i in range(9):
        t = 0.5 * i
        g = feed(tracker, t, int(100 * t), int(100 * (t // 2 * 2)))
    assert g is not None and g.partitions[0].service_rate == pytest.approx(100.0)
    fast = LagTracker(tau_s=100.0)
    for i in range(9):
        t = 0.5 * i
        g = feed(fast, t, int(100 * t), int(100 * (t // 2 * 2)))
    assert g.partitions[0].service_rate < 60  # the first interval read 0 and stays in the average


def test_a_group_without_a_position_has_no_lag_and_is_not_rated_before_two_samples():
    tracker = LagTracker()
    g = feed(tracker, 0.0, 10, None)
    assert math.isnan(g.partitions[0].lag_seconds) and not g.rated
    assert feed(tracker, 1.0, 20, None).rated  # the arrival rate is known; no position needs no service rate


def test_a_reduce_job_is_judged_at_its_progress_against_the_same_tables():
    tracker = LagTracker(tau_s=1.0)
    for t in range(5):
        tracker.observe_ends(float(t), {("routed", 0): 10 * t, ("routed", 1): 0})
    job = tracker.observe_group("job", REDUCE, 4.0, {("routed", 0): 20, ("routed", 1): -1},
                                [("routed", 0), ("routed", 1)], reported_at=4.0)  # fmt: skip
    # offset 20 was appended when the end reached 21, at t=2.1: lag 1.9 s; partition 1 unknown
    assert job.lag_seconds() == pytest.approx(1.9) and job.lag_records() == 20
    assert math.isnan(job.partitions[1].lag_seconds)


def _group(tracker, topic_lags):
    """A router group whose partition of each topic lags ``seconds`` behind an end moving 100/s."""
    ends = {}
    for t in range(21):
        ends = {(topic, 0): 100 * t for topic in topic_lags}
        tracker.observe_ends(float(t), ends)
        positions = {(topic, 0): max(0, 100 * (t - lag)) for topic, lag in topic_lags.items()}
        g = tracker.observe_group("routers", ROUTER, float(t), positions)
    return g


def test_observations_add_the_stages_lags_and_share_the_reduce_backlog_by_kept_rate():
    tracker = LagTracker(tau_s=1.0)
    router = _group(tracker, {"a": 2, "b": 4})
    for t in range(21):
        tracker.observe_ends(float(t), {("routed", 0): 100 * t})
        at = {("routed", 0): max(0, 100 * (t - 3))}
        reduce = tracker.observe_group("job", REDUCE, float(t), at, reported_at=float(t))
    streams = [StreamDeclaration("a", 10.0), StreamDeclaration("b", 10.0)]
    obs, service, views = observe_streams(streams, router, [reduce], {"a": 1.0, "b": 0.5}, {"a": 3.0}, 1.0)
    # lags: router 2 s / 4 s (offsets move 100/s: a lag of 200 / 400 records ends 0.01 s later) + reduce 3 s
    assert obs["a"].lag_s == pytest.approx(5.0 - 0.02) and obs["b"].lag_s == pytest.approx(7.0 - 0.02)
    assert obs["a"].trend is Trend.RISING and obs["b"].trend is Trend.FLAT  # b has no previous lag
    assert obs["a"].arrival_rate == pytest.approx(100.0) and obs["b"].arrival_rate == pytest.approx(100.0)
    # backlog: router records x keep + the reduce's 300 records shared 100 : 50 (kept rates)
    assert obs["a"].backlog == pytest.approx(200 * 1.0 + 300 * 2 / 3)
    assert obs["b"].backlog == pytest.approx(400 * 0.5 + 300 * 1 / 3)
    assert service == pytest.approx(100.0)  # the reduce's rate on the routed topic (kept records)
    assert views["b"].router_lag_s == pytest.approx(4.0 - 0.01)


def test_without_a_reduce_the_processing_rate_is_the_routers_consumption_times_the_keep():
    tracker = LagTracker(tau_s=1.0)
    router = _group(tracker, {"a": 1, "b": 1})
    streams = [StreamDeclaration("a", 10.0), StreamDeclaration("b", 10.0)]
    _, service, _ = observe_streams(streams, router, [], {"a": 1.0, "b": 0.25}, {}, 1.0)
    assert service == pytest.approx(100 * 1.0 + 100 * 0.25)


@pytest.mark.parametrize(
    ("lag", "prev", "want"),
    [(5, None, Trend.FLAT), (5, 3.9, Trend.RISING), (5, 4.5, Trend.FLAT), (3, 4.1, Trend.FALLING)],
)
def test_trend_beyond_the_tolerance(lag, prev, want):
    assert trend_of(lag, prev, 1.0) is want


def _event(epoch, etype, body):
    return {"epoch": epoch, "type": etype, "payload": ("io.ballast." + etype, body)}


def test_keeps_in_force_and_the_basis_that_makes_request_ids_unique_per_state():
    keeps = KeepsInForce()
    keeps.apply([_event(0, "TABLE_SNAPSHOT", {"keep_probability": {}})])
    assert keeps.keep_for("a") == 1.0 and keeps.basis_for("a") == 0
    first = request_id("s", "a", keeps.basis_for("a"), 0.5)
    keeps.apply(
        [_event(1, "ROUTING_UPDATE", {}), _event(2, "SHEDDING", {"target": "a", "keep_probability": 0.5})]
    )
    assert keeps.keep_for("a") == 0.5 and keeps.basis_for("a") == 2 and keeps.basis_for("b") == 0
    keeps.apply([_event(3, "SHEDDING", {"target": "a", "keep_probability": 1.0})])
    # shed to 0.5 again after a lift: another state, another id (not taken for a resend)
    assert request_id("s", "a", keeps.basis_for("a"), 0.5) != first
    keeps.apply([_event(4, "SHEDDING", {"target": "*", "keep_probability": 0.8})])
    assert keeps.keep_for("b") == 0.8 and keeps.basis_for("b") == 4 and keeps.keep_for("a") == 1.0
    keeps.apply([_event(5, "TABLE_SNAPSHOT", {"keep_probability": {"a": 0.3}})])
    assert keeps.keeps == {"a": 0.3} and keeps.basis_for("a") == 5
    assert request_id("s", "a", 7, 0.25) == "s:a@7->0.250"


def _sample(end_ms, group, stage, partition, lag_s, status="OK", group_status="OK"):
    body = LagSample(group, "t", partition, 5, 9, 4, lag_s, stage, status, group_status, 10.0, 8.0)
    return Metric("shedder-1", end_ms - 1000, end_ms, body)


def test_lag_report_keeps_each_groups_newest_cycle():
    metrics = [
        _sample(1000, "routers", "router", 0, 1.0),
        _sample(2000, "routers", "router", 0, 3.0, "WARN", "WARN"),
        _sample(2000, "routers", "router", 1, math.nan, "OK", "WARN"),
        _sample(2000, "job", "reduce", 0, 0.5),
    ]
    reports = group_reports(metrics)
    assert [(r.stage, r.group) for r in reports] == [("router", "routers"), ("reduce", "job")]
    routers = reports[0]
    assert (routers.status, routers.lag_seconds, routers.lag_records, len(routers.partitions)) == (
        "WARN",
        3.0,
        8,
        2,
    )
    assert (
        routers.as_dict()["lag_seconds"] == 3.0
        and reports[1].as_dict(True)["by_partition"][0]["lag_seconds"] == 0.5
    )
    table = format_table(reports, 3000, with_partitions=True).splitlines()
    assert table[0].split()[:4] == ["STAGE", "GROUP", "STATUS", "LAG"] and "3.0s" in table[1]
    assert any("t[1]" in line and "?" in line for line in table)


def test_a_scaling_action_holds_shed_decisions_for_its_warm_up():
    """Rates measured while a SCALE or an applied SCALING decision warms up are the reconfiguration's:
    the shedder decides nothing for ``scaling_hold_s`` after it; a dry-run decision holds nothing."""
    keeps = KeepsInForce()
    assert not keeps.warming_up(10_000, 30.0)
    dry = {"mode": "DRY_RUN", "stage": "reduce"}
    keeps.apply([{**_event(1, "SCALING", dry), "issued_at": 100_000}])
    assert not keeps.warming_up(100_500, 30.0)
    keeps.apply([{**_event(2, "SCALING", {**dry, "mode": "APPLIED"}), "issued_at": 200_000}])
    assert keeps.warming_up(200_000 + 29_999, 30.0) and not keeps.warming_up(200_000 + 30_000, 30.0)
    keeps.apply([{**_event(3, "SCALE", {"num_workers": 4}), "issued_at": 300_000}])
    assert keeps.warming_up(310_000, 30.0) and keeps.scaled_epoch == 3
    assert not keeps.warming_up(310_000, 0.0)  # a hold of 0: never
