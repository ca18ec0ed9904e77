"""The Burrow-style status, one test per rule and per precedence between rules, and the group's."""

from __future__ import annotations

import math

import pytest

from services.shedder.lag_status import (
    Evaluation,
    PartitionHistory,
    Status,
    StatusRules,
    Verdict,
    group_status,
    partition_status,
)

pytestmark = pytest.mark.unit

RULES = StatusRules(window=5, allowed_lag_s=0.0, stop_after_s=60.0)


def window(committed, lags, ends=None, every=5.0, reported=None, t0=1_000.0) -> list[Evaluation]:
    """Evaluations ``every`` seconds apart; end offsets 1,000 ahead of the position unless given."""
    ends = ends or [c + 1_000 for c in committed]
    return [
        Evaluation(t0 + i * every, e, c, lag, reported if reported is None else reported(i))
        for i, (c, lag, e) in enumerate(zip(committed, lags, ends, strict=True))
    ]


def status(evaluations, rules=RULES) -> Status:
    return partition_status(evaluations, rules).status


def test_a_caught_up_consumer_is_ok_whatever_came_before():
    falling_behind = window([0, 10, 20, 30, 40], [1.0, 2.0, 3.0, 4.0, 5.0])
    assert status(falling_behind) is Status.WARN
    caught_up = [*falling_behind[:-1], Evaluation(1_020.0, 40, 40, 0.0)]
    assert status(caught_up) is Status.OK
    # within the allowed lag counts as caught up, and no position known is OK too
    assert status(falling_behind, StatusRules(allowed_lag_s=5.0)) is Status.OK
    assert status([Evaluation(1.0, 100, None, math.nan)]) is Status.OK
    assert status([]) is Status.OK


def test_lag_zero_anywhere_in_the_window_is_ok():
    dipped = window([0, 10, 20, 30, 40], [3.0, 0.0, 3.0, 4.0, 5.0])
    assert status(dipped) is Status.OK
    dipped = window([0, 10, 10, 10, 10], [3.0, 4.0, 5.0, 6.0, 7.0])
    dipped[0] = Evaluation(1_000.0, 0, 0, 0.0)  # the committed offset was at the end: nothing to read
    assert status(dipped) is Status.OK


def test_an_unmoving_offset_with_lag_throughout_is_a_stall():
    assert status(window([50] * 5, [10.0, 15.0, 20.0, 25.0, 30.0])) is Status.STALL
    # one move in the window and it is a consumer falling behind, not a stall
    assert status(window([50, 50, 50, 50, 51], [10.0, 15.0, 20.0, 25.0, 30.0])) is Status.WARN


def test_a_lag_that_rises_and_never_falls_is_a_warning():
    assert status(window([0, 10, 20, 30, 40], [5.0, 6.0, 6.0, 7.5, 9.0])) is Status.WARN
    assert status(window([0, 10, 20, 30, 40], [5.0, 6.0, 5.5, 7.5, 9.0])) is Status.OK  # fell once
    assert status(window([0, 10, 20, 30, 40], [5.0] * 5)) is Status.OK  # constant: not rising
    # the time lag unknown somewhere: the lag in records decides
    rising = window([0, 10, 20, 30, 40], [5.0, math.nan, 6.0, 7.0, 8.0], ends=[100, 120, 140, 160, 180])
    assert status(rising) is Status.WARN
    falling = window([0, 10, 20, 30, 40], [5.0, math.nan, 6.0, 7.0, 8.0], ends=[100, 105, 110, 115, 120])
    assert status(falling) is Status.OK


def test_trends_wait_for_a_full_window():
    assert status(window([50] * 4, [10.0, 15.0, 20.0, 25.0])) is Status.OK
    # evaluations without a position do not count towards it
    gaps = [*window([50] * 4, [10.0, 15.0, 20.0, 25.0]), Evaluation(1_021.0, 2_000, None, math.nan)]
    assert status(gaps) is Status.OK


def test_a_rewind_is_an_error_until_the_consumer_gets_back_to_where_it_was():
    ends = [1_500, 1_510, 1_520, 1_530, 1_540]
    rewound = window([500, 510, 100, 120, 140], [3.0, 3.0, 40.0, 41.0, 42.0], ends=ends)
    verdict = partition_status(rewound, RULES)
    assert verdict.status is Status.ERR and "510 to 100" in verdict.reason
    recovered = window([500, 510, 100, 300, 520], [3.0, 3.0, 40.0, 20.0, 2.0], ends=ends)
    assert status(recovered) is Status.OK
    # the rewind left the window: judged on what followed (here: falling behind)
    assert status(window([100, 120, 140, 160, 180], [40.0, 41.0, 42.0, 43.0, 44.0])) is Status.WARN


def test_a_log_end_that_went_back_is_an_error():
    truncated = window([0, 10, 20, 30, 40], [3.0, 2.0, 4.0, 3.0, 5.0], ends=[900, 950, 500, 520, 540])
    verdict = partition_status(truncated, RULES)
    assert verdict.status is Status.ERR and "950 to 500" in verdict.reason


def test_a_consumer_silent_beyond_the_threshold_with_an_old_unread_record_is_stopped():
    # reported 100 s ago, the oldest unread record waited 90 s: gone
    gone = window([50] * 5, [70.0, 75.0, 80.0, 85.0, 90.0], reported=lambda i: 920.0)
    assert status(gone) is Status.STOP
    # the same silence, but the record waiting arrived 30 s ago (it had nothing to read before)
    idle = window([50] * 5, [10.0, 15.0, 20.0, 25.0, 30.0], reported=lambda i: 920.0)
    assert status(idle) is Status.STALL
    # alive (a report 5 s ago) with its offset unmoved: stuck, not gone
    stuck = window([50] * 5, [70.0, 75.0, 80.0, 85.0, 90.0], reported=lambda i: 1_015.0 + i)
    assert status(stuck) is Status.STALL


def test_stop_is_judged_before_the_zero_lag_rule_and_the_full_window():
    # two evaluations only, the first caught up long ago: silent for 200 s with a record 150 s old
    history = [Evaluation(800.0, 50, 50, 0.0, 800.0), Evaluation(1_000.0, 400, 50, 150.0, 800.0)]
    assert status(history) is Status.STOP


def test_without_reports_the_last_move_of_the_offset_counts_and_the_history_remembers_it():
    history = PartitionHistory(StatusRules(window=3, stop_after_s=60.0))
    verdicts = []
    for t in range(0, 200, 10):
        committed = min(t, 50) * 10  # the consumer moves until t=50, then stops
        end = 10 * t + 100  # the producer goes on
        appended = committed / 10 - 10  # the record at the committed offset (end = 10 t + 100)
        verdicts.append(history.observe(Evaluation(float(t), end, committed, t - appended)))
    statuses = [v.status for v in verdicts]
    assert statuses[:5] == [Status.OK] * 5  # moving; not a full window of lag yet at first
    assert statuses[7] is Status.STALL  # unmoved over the window of 3 (t = 50, 60, 70)
    # at t=120 the offset has not moved for 70 s (> 60 s, far beyond the window) and the record
    # waiting at it was written at t=40, 80 s ago
    assert statuses[11] is Status.STALL and statuses[12] is Status.STOP and statuses[-1] is Status.STOP


def test_a_group_is_its_worst_partition():
    verdicts = {
        ("t", 0): Verdict(Status.OK, "caught up"),
        ("t", 1): Verdict(Status.STALL, "x"),
        ("t", 2): Verdict(Status.WARN, "y"),
    }
    assert group_status(verdicts) == (Verdict(Status.STALL, "x"), ("t", 1))
    assert group_status({**verdicts, ("t", 3): Verdict(Status.ERR, "z")})[0].status is Status.ERR
    assert group_status({})[0].status is Status.OK
    assert Status.OK < Status.WARN < Status.STALL < Status.STOP < Status.ERR
    assert str(Status.STALL) == "STALL"


def test_the_rules_refuse_nonsense():
    for bad in ({"window": 1}, {"allowed_lag_s": -1.0}, {"stop_after_s": 0.0}):
        with pytest.raises(ValueError):
            StatusRules(**bad)
