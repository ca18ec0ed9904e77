"""The fault campaign's judge on rows and letters made by hand: each definition of docs/chaos.md
(records lost, rows wrong, false exact, late, coverage, unjudged) can fail, and does where it should."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from ballast.harness.judge import ROW_FIELDS
from bench.chaos.judge import judge, keep_low
from bench.chaos.ledger import DATA, FLUSH, JUNK, SKEWED, Records
from bench.chaos.readback import Letter
from bench.chaos.recovery import pipeline_lag, recovery

pytestmark = pytest.mark.unit

W = 10_000
MARGIN = 10_000
REACH = 120_000
UNTIL = 1_000_000  # every window below is due


def records(rows: list[tuple[str, str, float, int]]) -> Records:
    """(kind, key, value, event time) per record; record i sits at input partition 0, offset i."""
    kinds, keys, values, times = zip(*rows, strict=True)
    n = len(rows)
    return Records(
        kind=np.array(kinds, dtype=object),
        key=np.array(keys, dtype=object),
        value=np.array(values, dtype=float),
        time=np.array(times, dtype=np.int64),
        partition=np.zeros(n, dtype=np.int64),
        offset=np.arange(n),
    )


def row(key: str, start: int, count: int, total: float, **kw: object) -> dict:
    """An exact row unless ``kw`` says otherwise."""
    base = {f: np.nan for f in ROW_FIELDS}
    base.update(
        key=key,
        window_start=start,
        revision=0,
        count=count,
        sum=total,
        excluded_records=0,
        exact=True,
        sampled_records=0,
        keep_probability=1.0,
    )
    base.update(kw)
    return base


def frame(*rows: dict) -> pd.DataFrame:
    return pd.DataFrame(list(rows), columns=list(ROW_FIELDS))


def run(
    recs: Records, rows: pd.DataFrame, letters: tuple[Letter, ...] = (), keeps: tuple = (), until: int = UNTIL
):
    return judge(recs, list(letters), rows, list(keeps), W, until, MARGIN, REACH)


THREE = records([(DATA, "a", 1.0, 1_000), (DATA, "a", 2.0, 2_000), (DATA, "a", 4.25, 9_999)])


def test_an_exact_row_equal_to_the_reference_is_right() -> None:
    r = run(THREE, frame(row("a", 0, 3, 7.25)))
    assert (r["records_lost"], r["rows_wrong"], r["false_exact"], r["late_records"]) == (0, 0, 0, 0)
    assert r["exact_windows"] == 1 and r["windows"] == 1


def test_an_exact_row_short_of_records_loses_them_and_is_a_false_exact() -> None:
    r = run(THREE, frame(row("a", 0, 2, 3.0)))
    assert (r["records_lost"], r["rows_wrong"], r["false_exact"]) == (1, 1, 1)
    assert r["lost_detail"]["exact_rows_short"] == 1


def test_an_exact_row_with_the_right_count_and_a_wrong_sum_is_wrong_not_lost() -> None:
    r = run(THREE, frame(row("a", 0, 3, 7.0)))
    assert (r["records_lost"], r["rows_wrong"], r["false_exact"]) == (0, 1, 1)


def test_the_final_row_is_the_highest_revision() -> None:
    r = run(THREE, frame(row("a", 0, 3, 7.25, revision=1), row("a", 0, 2, 3.0, exact=False)))
    assert (r["records_lost"], r["rows_wrong"]) == (0, 0)


def test_a_late_record_is_excluded_in_its_row_and_counted_late() -> None:
    late = (Letter("late", "reduce", 2),)
    right = run(THREE, frame(row("a", 0, 2, 3.0, excluded_records=1)), late)
    assert (right["records_lost"], right["rows_wrong"], right["late_records"]) == (0, 0, 1)
    counted_anyway = run(THREE, frame(row("a", 0, 3, 7.25)), late)
    assert counted_anyway["false_exact"] == 1  # the late record is in the count, not in excluded


def test_a_too_late_record_is_in_no_row_and_the_row_owes_the_others() -> None:
    letters = (Letter("too-late", "reduce", 2),)
    r = run(THREE, frame(row("a", 0, 2, 3.0)), letters)
    assert (r["records_lost"], r["rows_wrong"], r["late_records"]) == (0, 0, 1)


def test_a_window_without_a_row_outside_shedding_loses_its_records() -> None:
    r = run(THREE, frame())
    assert r["records_lost"] == 3 and r["lost_detail"]["windows_missing"] == 1


def test_a_window_all_of_whose_records_are_dead_lettered_needs_no_row() -> None:
    letters = tuple(Letter("future", "router", i) for i in range(3))
    r = run(THREE, frame(), letters)
    assert (r["records_lost"], r["rows_wrong"], r["late_records"]) == (0, 0, 0)
    assert r["dead_letters"]["by_stage_reason"] == {"router:future": 3}


def test_shedding_explains_a_missing_row_only_when_losing_every_record_was_likely() -> None:
    keeps = ({"at_ms": -5_000, "keep": 0.3, "epoch": 5, "reason": ""},)
    few = run(THREE, frame(), keeps=keeps)
    assert few["records_lost"] == 0 and few["coverage"]["without_row"] == 1
    many = records([(DATA, "a", 1.0, 1_000 + i) for i in range(60)])  # 0.7 ** 60 < 1e-6
    assert run(many, frame(), keeps=keeps)["records_lost"] == 60
    lifted = (
        {"at_ms": -200_000, "keep": 0.3, "epoch": 5, "reason": ""},
        {"at_ms": -100_000, "keep": 1.0, "epoch": 6, "reason": ""},
    )
    assert run(THREE, frame(), keeps=lifted)["records_lost"] == 3  # no shedding anywhere near the window


def test_a_shed_row_is_judged_by_its_interval_and_may_not_claim_more_than_was_offered() -> None:
    est = {"exact": False, "count_low": 2.0, "count_high": 5.0, "sum_low": 5.0, "sum_high": 9.0}
    r = run(THREE, frame(row("a", 0, 2, 3.0, **est)))
    assert (
        r["rows_wrong"] == 0
        and r["coverage"]["count_with_row"] == 1.0
        and r["coverage"]["sum_with_row"] == 1.0
    )
    miss = run(THREE, frame(row("a", 0, 2, 3.0, **{**est, "count_high": 2.5})))
    assert miss["coverage"]["count_with_row"] == 0.0 and miss["rows_wrong"] == 0
    over = run(THREE, frame(row("a", 0, 4, 9.0, **est)))
    assert over["rows_wrong"] == 1 and over["wrong_detail"]["over_offered"] == 1


def test_rows_of_one_revision_must_agree_and_windows_without_records_have_no_row() -> None:
    twice = run(THREE, frame(row("a", 0, 3, 7.25), row("a", 0, 2, 3.0)))
    assert twice["wrong_detail"]["replays_differing"] == 1
    stray = run(THREE, frame(row("a", 0, 3, 7.25), row("b", 0, 1, 1.0)))
    assert stray["wrong_detail"]["unexpected_windows"] == 1 and stray["rows_wrong"] == 1


def test_an_earlier_exact_revision_above_the_truth_is_wrong() -> None:
    r = run(THREE, frame(row("a", 0, 4, 8.0), row("a", 0, 3, 7.25, revision=1)))
    assert r["wrong_detail"]["earlier_exact_over"] == 1 and r["false_exact"] == 0


def test_junk_must_be_dead_lettered_and_flush_events_are_owed_nothing() -> None:
    recs = records([(DATA, "a", 1.0, 1_000), (JUNK, "", np.nan, 0), (FLUSH, "zz-flush", 0.0, 50_000)])
    assert run(recs, frame(row("a", 0, 1, 1.0)))["records_lost"] == 1
    lettered = run(recs, frame(row("a", 0, 1, 1.0)), (Letter("malformed", "router", 1),))
    assert lettered["records_lost"] == 0 and lettered["records"] == 2


def test_windows_the_watermark_never_passed_are_unjudged() -> None:
    recs = records([(DATA, "a", 1.0, 1_000), (SKEWED, "a", 2.0, 1_800_000)])
    r = run(recs, frame(row("a", 0, 1, 1.0)), until=20_000)
    assert r["records_lost"] == 0 and r["unjudged_windows"] == 1 and r["unjudged_records"] == 1
    assert r["skewed"] == {"records": 1, "letters": {}, "without_letter": 1}


def test_undelivered_records_are_not_owed() -> None:
    recs = records([(DATA, "a", 1.0, 1_000), (DATA, "a", 2.0, 2_000)])
    recs.partition[1] = -1
    assert run(recs, frame(row("a", 0, 1, 1.0)))["records_lost"] == 0


def test_keep_low_is_the_lowest_setting_in_force_over_the_span() -> None:
    keeps = [{"at_ms": 100, "keep": 0.5}, {"at_ms": 200, "keep": 0.2}, {"at_ms": 300, "keep": 1.0}]
    assert keep_low(keeps, 0, 50) == 1.0
    assert keep_low(keeps, 150, 160) == 0.5
    assert keep_low(keeps, 0, 250) == 0.2
    assert keep_low(keeps, 400, 500) == 1.0


def test_recovery_is_the_first_sample_under_target_after_the_fault_ended() -> None:
    lag = pipeline_lag(
        [
            (1_000, "router", 1.0),
            (1_000, "reduce", 4.0),
            (5_000, "router", 10.0),
            (5_000, "reduce", 25.0),
            (9_000, "router", 2.0),
            (9_000, "reduce", 5.0),
            (12_000, "router", 1.0),
        ]
    )
    assert lag == [(1_000, 1.0, 4.0), (5_000, 10.0, 25.0), (9_000, 2.0, 5.0), (12_000, 1.0, 5.0)]
    r = recovery({"injected_at": 2_000, "ended_at": 4_000}, lag, 20.0)
    assert r == {"recovery_s": 5.0, "lag_at_injection_s": 5.0, "peak_lag_s": 35.0, "recovered": True}
    never = recovery({"injected_at": 2_000, "ended_at": 13_000}, lag, 20.0)
    assert never["recovery_s"] is None and not never["recovered"]


def test_late_records_are_attributed_to_the_faults_their_event_times_point_at() -> None:
    late = (Letter("late", "reduce", 1), Letter("too-late", "reduce", 2))
    spans = [("stop-router router-1", 1_500, 5_000), ("kill-broker broker-2", 50_000, 60_000)]
    r = judge(
        THREE, list(late), frame(row("a", 0, 1, 1.0, excluded_records=1)), [], W, UNTIL, 0, REACH, spans=spans
    )
    assert r["late_records"] == 2
    assert r["late_near_faults"] == {"stop-router router-1": 1, "kill-broker broker-2": 0, "none": 1}
