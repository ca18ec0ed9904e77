"""The judge of every output row must catch each way a row can be wrong (it is what the e2e tests
trust), and accept what the job's contract allows: replays and corrections ending exact."""

from __future__ import annotations

import pytest

from tests.support.output_judge import judge

pytestmark = pytest.mark.unit

REF = {("k", 0): {"count": 2, "sum": 5.0, "min": 1.0, "max": 4.0, "mean": 2.5, "window_end": 10}}
ALL = {("k", 0): {**REF[("k", 0)], "count": 3}}  # one record of the window was left out


def row(count=2, total=5.0, lo=1.0, hi=4.0, revision=0, excluded=0) -> dict:
    return {
        "key": "k", "window_start": 0, "window_end": 10, "count": count, "sum": total, "min": lo,
        "max": hi, "mean": total / count if count else None, "revision": revision,
        "excluded_records": excluded, "values": [],
    }  # fmt: skip


def test_one_exact_row_and_its_replays_pass():
    assert judge([row(), row()], REF) == []


def test_a_correction_ending_exact_passes():
    assert judge([row(1, 1.0, 1.0, 1.0), row(revision=1)], REF) == []


def test_a_wrong_row_overwritten_by_a_row_of_the_same_revision_fails():
    """The defect a keep-latest reader hides: (1, 1.0) then (1, 4.0), both revision 0."""
    problems = judge([row(1, 1.0, 1.0, 1.0), row(1, 4.0, 4.0, 4.0)], REF)
    assert any("two rows of revision 0" in p for p in problems)
    assert any("final row" in p for p in problems)


def test_revisions_going_down_fail():
    assert any("out of order" in p for p in judge([row(revision=1), row(revision=0)], REF))


def test_a_missing_window_and_an_extra_window_fail():
    assert judge([], REF) == ["('k', 0): no row"]
    extra = {**row(), "key": "other"}
    assert any("no records" in p for p in judge([row(), extra], REF))


def test_a_left_out_record_must_be_counted_in_the_final_row():
    assert judge([row(excluded=1)], REF, ALL) == []
    assert any("excluded" in p for p in judge([row()], REF, ALL))
    assert any("excluded" in p for p in judge([row(excluded=1), row(revision=1)], REF, ALL))


def test_a_window_whose_records_were_all_left_out_has_a_row_counting_them():
    every = {("k", 0): {**REF[("k", 0)], "count": 2}}
    assert judge([row(0, 0.0, None, None, excluded=2)], {}, every) == []
    assert judge([], {}, every) == ["('k', 0): no row"]
