"""The demo's pure parts: its input schedule, its read-back of the routed topic and the control log,
and its verdict rules, on inputs made by hand."""

from __future__ import annotations

import numpy as np
import pytest

from ballast.metrics.records import LagSample
from services.demo import verdicts
from services.demo.measure import control_series, interval_imbalance, lag_series
from services.demo.settings import DemoSettings
from services.demo.summary import RunSummary
from services.demo.workload import connect_events, demo_input, json_lines, scheduled_times

pytestmark = pytest.mark.unit


def test_the_hot_set_changes_at_each_shift_and_only_there() -> None:
    s = DemoSettings(input_s=40, shift_s=20, burst_at_s=10, burst_s=5, burst_factor=3, rate=500)
    inp = demo_input(s)
    assert [p.name for p in inp.phases] == ["calm", "burst", "recover"]
    assert [round(p.rate) for p in inp.phases] == [500, 1500, 500]
    assert inp.shifts_s == [0.0, 20.0] and inp.burst_s == [10.0, 15.0]
    times = scheduled_times(inp.phases, inp.events.ids.size)
    assert np.all(np.diff(times) >= 0) and times[-1] <= 40

    def hottest(lo: float, hi: float) -> int:
        ids = inp.events.ids[(times >= lo) & (times < hi)]
        return int(np.bincount(ids).argmax())

    assert hottest(0, 10) == hottest(10, 20)  # the same hot set within a period, burst or not
    assert hottest(0, 20) != hottest(20, 40)  # a fresh one after the shift


def test_the_same_settings_draw_the_same_input() -> None:
    a, b = demo_input(DemoSettings()), demo_input(DemoSettings())
    assert np.array_equal(a.events.ids, b.events.ids) and np.array_equal(a.events.values, b.events.values)
    assert np.all(a.events.values * 4 == np.round(a.events.values * 4))  # quarters: sums are exact


def test_the_connect_file_holds_every_event_as_json_the_router_reads() -> None:
    events = connect_events(DemoSettings(connect_records=3), start_ms=1_000)
    lines = list(json_lines(events))
    assert len(lines) == 3 and all(line.endswith("\n") for line in lines)
    assert '"event_time": 1000' in lines[0] and '"event_time": 1002' in lines[2]


def test_burst_must_end_within_the_input() -> None:
    with pytest.raises(ValueError, match="burst"):
        DemoSettings(input_s=30, burst_at_s=25, burst_s=10)
    with pytest.raises(ValueError, match="--runs"):
        DemoSettings(runs="ballast,nope")


def test_imbalance_per_interval_counts_every_record_by_its_worker() -> None:
    times = [0, 10, 20, 1_000, 1_500, 1_600, 2_500]
    workers = [0, 0, 1, 0, 1, 1, 0]
    rows = interval_imbalance(times, workers, 0, 3_000, 1_000, 2)
    # [0, 1000): w0 2, w1 1 -> 2/1.5; [1000, 2000): w0 1, w1 2; [2000, 3000): w0 1, w1 0 -> 2.0
    assert rows == [[0.0, round(2 / 1.5, 4)], [1.0, round(2 / 1.5, 4)], [2.0, 2.0]]
    assert interval_imbalance(times, workers, 5_000, 6_000, 1_000, 2) == []


def test_lag_series_takes_each_stages_largest_partition_and_skips_unknown() -> None:
    def sample(stage: str, p: int, lag: float) -> LagSample:
        return LagSample(group="g", topic="t", partition=p, committed_offset=0, end_offset=0, lag_records=0,
                         lag_seconds=lag, stage=stage)  # fmt: skip

    samples = [(2_000, sample("router", 0, 1.0)), (2_000, sample("router", 1, 3.0)),
               (2_000, sample("reduce", 0, float("nan"))), (3_000, sample("reduce", 0, 4.0))]
    rows = lag_series(samples, 1_000)
    assert rows == [[1.0, 3.0, None], [2.0, None, 4.0]]


def test_control_series_follows_the_table_through_updates_and_snapshots() -> None:
    def event(epoch: int, kind: str, **body: object) -> dict:
        return {"epoch": epoch, "issued_at": 1_000 + epoch * 1_000, "type": kind, "payload": ("x", body)}

    migrations, table = control_series([
        event(1, "MIGRATION_STEP", phase="START", keys=["a", "b"]),
        event(2, "ROUTING_UPDATE", assign={"a": 1, "b": 2}, unassign=[]),
        event(3, "TABLE_SNAPSHOT", table={"a": 1, "b": 2}),
        event(4, "ROUTING_UPDATE", assign={"c": 0}, unassign=["a"]),
        event(5, "MIGRATION_STEP", phase="DONE", keys=["a", "b"]),
    ], 1_000)  # fmt: skip
    assert migrations == [[1.0, 1, "START", 2], [5.0, 5, "DONE", 2]]
    assert table == [[2.0, 2, 2], [3.0, 3, 2], [4.0, 4, 2]]


def run(imbalance: list[list[float]], shifts: list[float], **kw: object) -> RunSummary:
    r = RunSummary(name="ballast", rebalance=True, shedding=True, theta=0.3, interval_s=5, target_s=15,
                   shifts_s=shifts, imbalance=imbalance, **kw)  # type: ignore[arg-type]  # fmt: skip
    return r


def test_settling_counts_the_intervals_above_before_the_run_stays_under() -> None:
    r = run([[0, 1.8], [5, 1.6], [10, 1.2], [15, 1.1], [20, 1.9], [25, 1.25], [30, 1.5], [35, 1.0]], [0, 20])
    # after 0 s: two above, then under until 20; after 20 s: 1.5 at 30 comes back above, so 3 intervals
    assert verdicts.settle_intervals(r, 40) == [2, 3]
    assert verdicts.loop_settles(r, 40).ok
    r.imbalance[-1] = [35, 1.4]  # never under again before the end
    assert verdicts.settle_intervals(r, 40) == [2, None]
    assert not verdicts.loop_settles(r, 40).ok


def test_lag_must_come_back_under_target_after_the_burst_and_stay_there() -> None:
    lag = [[t, 1.0, v] for t, v in ((10, 3.0), (20, 30.0), (30, 20.0), (40, 12.0), (50, 4.0), (60, 5.0))]
    r = run([], [0], lag=lag, burst_s=[15.0, 25.0])
    assert verdicts.lag_back_under(r, cycle_s=5, end_s=60).ok  # under from 40 s on: 13, 5 and 6 s
    assert r.figures["back_under_target_after_burst_s"] == 15.0 and r.figures["lag_peak_s"] == 31.0
    r.lag[-1] = [60, 1.0, 16.0]  # over again at the end of the input
    assert not verdicts.lag_back_under(r, cycle_s=5, end_s=60).ok
    r.lag = [[t, 1.0, 30.0] for t in (30, 40, 50, 60)]  # never back
    assert not verdicts.lag_back_under(r, cycle_s=5, end_s=60).ok
    assert r.figures["back_under_target_after_burst_s"] is None


def test_results_fail_on_one_wrong_exact_row_and_on_too_few_shed_windows() -> None:
    r = run([], [0])
    r.figures["results"] = {"rows": 10, "windows": 10, "exact_windows": 5, "exact_wrong": 0,
                            "missing_unshed": 0, "unexpected": 0}  # fmt: skip
    r.figures["coverage"] = {"shed_windows": 100, "without_row": 20, "count_with_row": 0.95,
                             "sum_with_row": 0.93, "no_estimate": 3, "no_estimate_over": 0}  # fmt: skip
    assert all(v.ok for v in verdicts.results_hold(r))
    r.figures["results"]["exact_wrong"] = 1
    assert not verdicts.results_hold(r)[0].ok
    r.figures["coverage"]["without_row"] = 80  # 20 windows with a row: too few to judge a rate
    assert not verdicts.results_hold(r)[1].ok

