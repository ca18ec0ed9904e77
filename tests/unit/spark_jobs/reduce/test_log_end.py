"""The log's end a batch carries is resolved from the control records' offsets, not their keys.

Anything can be produced to the control topic with any key; a key claiming an epoch the log never
reaches used to make every task wait for it until its deadline (issue 28, item 3)."""

from __future__ import annotations

import pandas as pd

from spark_jobs.reduce.stateful import resolve_log_end
from tests.support.engine_rows import COLUMNS, control, data


class Log:
    """Stands in for the worker's OwnershipLog: the epoch after each offset, as the test says."""

    def __init__(self, epochs: dict[int, int]) -> None:
        self.epochs = epochs
        self.asked: list[int] = []

    def epoch_through(self, offset: int, timeout: float) -> int:
        self.asked.append(offset)
        return self.epochs[offset]


def frame(rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=COLUMNS)


def test_control_rows_get_the_epoch_after_their_highest_offset():
    rows = [data("k", 1.0, 10, 2), {**control(999_999), "offset": 7}, {**control(3), "offset": 5}]
    log = Log({7: 3})
    out = resolve_log_end(frame(rows), log, 60.0)
    assert out["epoch"].tolist() == [2, 3, 3] and log.asked == [7]
    assert out["key"].tolist()[0] == "k"


def test_rows_without_control_records_or_from_before_offsets_are_left_alone():
    log = Log({})
    plain = frame([data("k", 1.0, 10, 2)])
    assert resolve_log_end(plain, log, 60.0) is plain
    old = frame([data("k", 1.0, 10, 2), control(5)])  # offset -1: a row from before offsets
    assert resolve_log_end(old, log, 60.0)["epoch"].tolist() == [2, 5] and not log.asked
