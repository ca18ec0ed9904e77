"""The shedding benchmark's pure parts: the truth, the judging of rows, coverage, the verdicts."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from ballast.harness import judge
from ballast.harness.control_series import applied_at, keep_at, keep_series
from ballast.harness.events import Events
from bench.shed import verdicts
from bench.shed.capacity import drain_rate
from bench.shed.lag import stage_lag

pytestmark = pytest.mark.unit

W = 10_000


def _events(rows: list[tuple[int, float, int]]) -> Events:
    ids, values, times = zip(*rows, strict=True)
    return Events(np.array(ids), np.array(values), np.array(times), ["a", "b"])


def _row(key: str, start: int, **kw) -> dict:
    """An exact row by default; ``kw`` overrides (an estimate: exact False and its interval)."""
    count, total = kw.pop("count", 1), kw.pop("sum", 1.0)
    row = {
        "key": key, "window_start": start, "revision": 0, "count": count, "sum": total,
        "excluded_records": 0, "exact": True, "sampled_records": 0, "keep_probability": 1.0,
        "estimated_count": float(count), "estimated_sum": total, "relative_error": 0.0,
        "count_std_error": 0.0, "sum_std_error": 0.0, "count_low": float(count),
        "count_high": float(count), "sum_low": total, "sum_high": total,
    }  # fmt: skip
    row.update(kw)
    return row


def _rows(*rows: dict) -> pd.DataFrame:
    return pd.DataFrame(list(rows), columns=list(judge.ROW_FIELDS))


# key a: 3 records in window 0 (sum 6), 2 in window 10 s (sum 4); key b: 4 records in window 0 (sum 4)
EVENTS = _events([(0, 1.0, 100), (0, 2.0, 5_000), (0, 3.0, 9_999), (0, 1.5, 10_000), (0, 2.5, 19_999),
                  (1, 1.0, 1), (1, 1.0, 2), (1, 1.0, 3), (1, 1.0, 4)])  # fmt: skip


def test_truth_counts_every_offered_record_per_key_and_window():
    t = judge.truth(EVENTS, W)
    assert t.loc[("a", 0)].tolist() == [3, 6.0]
    assert t.loc[("a", 10_000)].tolist() == [2, 4.0]
    assert t.loc[("b", 0)].tolist() == [4, 4.0]
    assert len(t) == 3


def test_exact_rows_equal_to_the_truth_are_right_and_a_wrong_one_is_caught():
    expected = judge.truth(EVENTS, W)
    rows = _rows(
        _row("a", 0, count=3, sum=6.0), _row("a", 10_000, count=2, sum=4.0), _row("b", 0, count=3, sum=3.0)
    )
    lines = judge.judged(rows, expected, None, None, W)
    c = judge.checks(rows, lines, expected)
    got = (c["windows"], c["exact_windows"], c["exact_wrong"], c["missing_unshed"], c["unexpected"])
    assert got == (3, 3, 1, 0, 0)
    assert judge.coverage(lines)["shed_windows"] == 0
    assert c["exact_wrong_examples"] == [{"key": "b", "window_start": 0, "seen": 3, "true_count": 4}]
    assert c["exact_wrong_in_span"] == 0
    # the same row inside the shedding span: its records drawn below 1 were all dropped
    inside = judge.checks(rows, judge.judged(rows, expected, 0, 10_000, W), expected)
    assert inside["exact_wrong_in_span"] == 1


def test_a_late_record_counts_in_the_count_and_leaves_the_sum_out():
    expected = judge.truth(EVENTS, W)
    # one of a's records in window 0 came late: count 2, excluded 1, sum over the counted only
    rows = _rows(_row("a", 0, count=2, sum=3.0, excluded_records=1), _row("a", 10_000, count=2, sum=4.0),
                 _row("b", 0, count=4, sum=4.0))  # fmt: skip
    lines = judge.judged(rows, expected, None, None, W)
    assert bool(lines.loc[("a", 0), "exact_correct"]) and bool(lines.loc[("a", 0), "late"])
    assert judge.checks(rows, lines, expected)["exact_wrong"] == 0


def test_coverage_counts_shed_rows_in_and_out_and_a_window_with_no_row_while_shedding_as_a_miss():
    expected = judge.truth(EVENTS, W)
    est = {"exact": False, "sampled_records": 2, "keep_probability": 0.5}
    rows = _rows(
        # a/0: true count 3, sum 6, both inside their intervals
        _row("a", 0, count=2, sum=3.0, estimated_count=4.0, estimated_sum=6.0, count_low=2.0, count_high=6.0,
             sum_low=1.0, sum_high=11.0, relative_error=0.3, **est),
        # a/10 s: true count 2, outside [3, 5]; sum 4 inside
        _row("a", 10_000, count=2, sum=4.0, estimated_count=4.0, estimated_sum=8.0, count_low=3.0,
             count_high=5.0, sum_low=2.0, sum_high=12.0, relative_error=0.3, **est),
    )  # fmt: skip
    # b/0 has no row: within the shedding span it is a window all of whose records were shed
    lines = judge.judged(rows, expected, 0, 30_000, W)
    cov = judge.coverage(lines)
    assert cov["shed_windows"] == 3 and cov["without_row"] == 1
    assert cov["count"] == pytest.approx(1 / 3, abs=1e-4)
    assert cov["sum"] == pytest.approx(2 / 3, abs=1e-4)
    assert judge.checks(rows, lines, expected)["missing_unshed"] == 0
    # outside the span the same missing window is an error, not a miss
    lines = judge.judged(rows, expected, 20_000, 30_000, W)
    assert judge.checks(rows, lines, expected)["missing_unshed"] == 1
    errors = {x["window_start"]: x for x in judge.over_time(lines)}
    assert errors[0]["count_error_p50"] == pytest.approx(1 / 3, abs=1e-4)
    assert errors[10_000]["count_error_p50"] == pytest.approx(1.0)


def test_a_row_that_says_no_estimate_is_counted_apart_and_may_not_claim_more_than_the_truth():
    expected = judge.truth(EVENTS, W)
    nan = float("nan")
    opaque = {"exact": False, "keep_probability": 0.5, "relative_error": float("inf"), "estimated_sum": nan,
              "count_std_error": nan, "sum_std_error": nan, "count_low": nan, "count_high": nan,
              "sum_low": nan, "sum_high": nan}  # fmt: skip
    rows = _rows(
        _row("a", 0, count=2, sum=3.0, estimated_count=2.0, **opaque),  # saw 2 of 3: a floor
        _row("a", 10_000, count=2, sum=4.0),
        _row("b", 0, count=5, sum=5.0, estimated_count=5.0, **opaque),  # claims 5 of 4: wrong
    )
    cov = judge.coverage(judge.judged(rows, expected, 0, 30_000, W))
    assert (cov["shed_windows"], cov["no_estimate"], cov["no_estimate_over"]) == (0, 2, 1)
    assert not verdicts.covered({**cov, "shed_windows": 500, "count": 0.95, "sum": 0.93})["covered"]


def test_the_latest_revision_is_judged_and_an_earlier_exact_row_may_not_claim_more_than_the_truth():
    expected = judge.truth(EVENTS, W)
    rows = _rows(_row("a", 0, count=2, sum=3.0), _row("a", 0, count=3, sum=6.0, revision=1),
                 _row("a", 10_000, count=2, sum=4.0), _row("b", 0, count=4, sum=4.0))  # fmt: skip
    lines = judge.judged(rows, expected, None, None, W)
    c = judge.checks(rows, lines, expected)
    assert (c["rows"], c["revised_windows"], c["exact_wrong"], c["exact_rows_over_truth"]) == (4, 1, 0, 0)
    over = _rows(_row("a", 0, count=5, sum=3.0), _row("a", 0, count=3, sum=6.0, revision=1),
                 _row("a", 10_000, count=2, sum=4.0), _row("b", 0, count=4, sum=4.0))  # fmt: skip
    assert (
        judge.checks(over, judge.judged(over, expected, None, None, W), expected)["exact_rows_over_truth"]
        == 1
    )


def test_first_exact_start_is_where_every_later_window_is_exact_and_right():
    expected = judge.truth(EVENTS, W)
    shed = {"exact": False, "estimated_count": 4.0}
    rows = _rows(_row("a", 0, count=2, sum=3.0, **shed), _row("a", 10_000, count=2, sum=4.0),
                 _row("b", 0, count=4, sum=4.0))  # fmt: skip
    lines = judge.judged(rows, expected, 0, 10_000, W)
    assert judge.first_exact_start(lines) == 10_000
    wrong = _rows(
        _row("a", 0, count=3, sum=6.0), _row("a", 10_000, count=1, sum=4.0), _row("b", 0, count=4, sum=4.0)
    )
    assert judge.first_exact_start(judge.judged(wrong, expected, None, None, W)) is None


def _lag(points: list[tuple[float, float]]) -> list[tuple[int, float]]:
    return [(int(t * 1000), v) for t, v in points]


def test_lag_on_passes_when_every_stretch_over_target_ends_within_the_cycles():
    # target 20 s, cycles of 5 s: a 10 s stretch passes, an 18 s one fails, one still open fails
    short = _lag([(0, 5), (10, 15), (20, 22), (25, 24), (30, 19), (60, 8), (100, 5)])
    v = verdicts.lag_on(short, 20.0, 5.0, 3, (0, 90_000))
    assert v["back_under_target"] and v["excursions"] == 1 and v["longest_over_target_s"] == 10.0
    assert v["peak_lag_s"] == 24
    long = _lag([(0, 5), (20, 22), (38, 21), (40, 19)])
    assert not verdicts.lag_on(long, 20.0, 5.0, 3, (0, 90_000))["back_under_target"]
    open_ = _lag([(0, 5), (80, 22), (100, 30)])
    v = verdicts.lag_on(open_, 20.0, 5.0, 3, (0, 90_000))
    assert not v["back_under_target"] and v["longest_over_target_s"] is None
    assert verdicts.lag_on(_lag([(0, 3), (50, 9)]), 20.0, 5.0, 3, (0, 90_000))["back_under_target"]


def test_lag_off_grows_without_bound_only_if_it_rose_to_the_end_and_ended_over_target():
    growing = _lag([(t, 2 + 0.5 * t) for t in range(0, 181, 5)])
    v = verdicts.lag_off(growing, 20.0, 0.2, (0, 180_000))
    assert v["grows_without_bound"] and v["growth_s_per_s"] == pytest.approx(0.5)
    flat = _lag([(t, 25.0) for t in range(0, 181, 5)])
    assert not verdicts.lag_off(flat, 20.0, 0.2, (0, 180_000))["grows_without_bound"]
    low = _lag([(t, 0.05 * t) for t in range(0, 181, 5)])
    assert not verdicts.lag_off(low, 20.0, 0.02, (0, 180_000))["grows_without_bound"]  # ends at 9 s


def test_pipeline_lag_is_router_plus_reduce_of_the_samples_that_have_both():
    samples = [
        {"at_ms": 1, "router_s": 0.5, "reduce_s": 2.0},
        {"at_ms": 2, "router_s": None, "reduce_s": 1.0},
    ]
    assert verdicts.pipeline_lag(samples) == [(1, 2.5)]


def _shedding(epoch: int, at: int, target: str, keep: float) -> dict:
    body = {"target": target, "keep_probability": keep, "reason": "r", "seed": 1}
    return {"epoch": epoch, "issued_at": at, "type": "SHEDDING", "payload": ("x", body)}


def test_keep_series_follows_the_topic_then_star_rule_and_lifting_is_judged_from_the_overload_end():
    log = [
        {"epoch": 1, "issued_at": 0, "type": "ROUTING_UPDATE", "payload": ("x", {})},
        _shedding(2, 10_000, "other", 0.1),  # another topic: no change
        _shedding(3, 20_000, "*", 0.5),
        _shedding(4, 25_000, "in", 0.4),
        _shedding(5, 30_000, "*", 1.0),  # the topic's own setting still holds
        _shedding(6, 100_000, "in", 0.8),
        _shedding(7, 105_000, "in", 1.0),
    ]
    keeps = keep_series(log, "in")
    assert [(k["epoch"], k["keep"]) for k in keeps] == [(3, 0.5), (4, 0.4), (6, 0.8), (7, 1.0)]
    assert keep_at(keeps, 26_000) == 0.4 and keep_at(keeps, 5_000) == 1.0
    v = verdicts.lifting(keeps, 95_000, 5.0, 3)
    assert v["shed"] and v["lowest_keep"] == 0.4 and v["lifted_epoch"] == 7
    assert v["lifted_after_overload_s"] == 10.0 and v["lifted_in_time"]
    assert not verdicts.lifting(keeps, 85_000, 5.0, 3)["lifted_in_time"]  # 20 s > 15 s
    assert not verdicts.lifting(keeps[:2], 95_000, 5.0, 3)["lifted_in_time"]  # never lifted
    assert not verdicts.lifting([], 95_000, 5.0, 3)["shed"]
    # the keeps at 20 s and 25 s were set before an overload starting at 26 s: a shed of calm input
    assert verdicts.lifting(keeps, 95_000, 5.0, 3, overload_start_ms=26_000)["shed_before_overload"] == 2
    assert verdicts.lifting(keeps, 95_000, 5.0, 3, overload_start_ms=10_000)["shed_before_overload"] == 0


def test_applied_at_is_the_first_marker_sample_at_or_past_the_epoch():
    samples = [(1_000, 5), (2_000, 6), (3_000, 7), (4_000, 7)]
    assert applied_at(7, samples) == 3_000 and applied_at(8, samples) is None


def test_exact_again_needs_every_window_from_the_one_after_the_lift_applied():
    assert verdicts.exact_again(110_000, 104_000, W, 95_000)["exact_again"]
    assert verdicts.exact_again(100_000, 100_000, W, 95_000)["exact_again"]  # applied on a boundary
    v = verdicts.exact_again(120_000, 104_000, W, 95_000)
    assert not v["exact_again"] and v["first_window_due_ms"] == 110_000
    assert v["first_exact_after_overload_s"] == 25.0
    assert not verdicts.exact_again(None, 104_000, W, 95_000)["exact_again"]
    # with the reduce's exact margin, the first window due is the one starting margin after the lift
    v = verdicts.exact_again(120_000, 104_000, W, 95_000, margin_ms=10_000)
    assert v["exact_again"] and v["first_window_due_ms"] == 120_000
    assert not verdicts.exact_again(130_000, 104_000, W, 95_000, margin_ms=10_000)["exact_again"]


def test_coverage_verdict_needs_both_in_band_and_enough_windows():
    cov = {"shed_windows": 500, "count": 0.95, "sum": 0.93}
    assert verdicts.covered(cov)["covered"]
    assert not verdicts.covered({**cov, "sum": 0.88})["covered"]
    assert not verdicts.covered({**cov, "count": 0.995})["covered"]
    assert not verdicts.covered({**cov, "shed_windows": 50})["covered"]


def test_stage_lag_is_the_oldest_unread_record_and_zero_at_the_end():
    lag, records = stage_lag(10_000, {0: 5, 1: 9}, {0: 10, 1: 9}, {0: 4_000, 1: None})
    assert (lag, records) == (6.0, 5)
    assert stage_lag(10_000, {0: 10}, {0: 10}, {0: None}) == (0.0, 0)


def test_drain_rate_and_natural_lag():
    batches = [{"start_ms": 0, "duration_ms": 500, "rows": 10},  # before the backlog
               {"start_ms": 1_000, "duration_ms": 4_000, "rows": 8_000},
               {"start_ms": 5_500, "duration_ms": 4_500, "rows": 10_000},
               {"start_ms": 11_000, "duration_ms": 100, "rows": 0}]  # fmt: skip
    d = drain_rate(batches, 1_000)
    assert d["capacity"] == pytest.approx(2_000.0) and d["batches"] == 2 and d["span_s"] == 9.0
    samples = [{"at_ms": t, "router_s": 0.2, "reduce_s": float(t % 4)} for t in range(0, 20)]
    lag = verdicts.lag_summary(samples, 10)
    assert lag["samples"] == 10 and lag["max_s"] == 3.2
