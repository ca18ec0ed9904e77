"""Windowed count, sum, min, max and mean per key: the mergeable processor.

Why it is mergeable: each statistic is a fold whose partial results combine (counts and sums add,
mins and maxes take the min and max), so a key's state can be split at a move and joined again
without replaying records; see :mod:`spark_jobs.processors.window_stats` for the one caveat, float
rounding of sums.

Sliding windows go through panes (:meth:`WindowStats.add`), so a sliding window's sum is added
pane by pane: one more reason it matches a one-pass sum exactly only for dyadic values.
"""

from __future__ import annotations

import struct

import numpy as np

from spark_jobs.processors.batch import BatchProcessor, Results
from spark_jobs.processors.interface import KeyRecords, Processor, WindowResult
from spark_jobs.processors.table import Column, Table
from spark_jobs.processors.window_stats import STATS_COLUMNS, WindowStats, record_rows
from spark_jobs.processors.windows import WindowSpec

_HEADER = struct.Struct("<2sB")  # tag, version
_TAG = b"ag"
_VERSION = 1


class WindowAggregate(Processor[WindowStats]):
    """Per key and window: count, sum, min, max, and mean (= sum / count at emit)."""

    name = "aggregate"
    mergeable = True

    def __init__(self, windows: WindowSpec) -> None:
        self.windows = windows

    def __repr__(self) -> str:
        return f"WindowAggregate({self.windows})"

    def batch(self) -> AggregateBatch:
        """The same aggregate on the batch path (the reduce engine uses this one)."""
        return AggregateBatch(self.windows)

    def init(self) -> WindowStats:
        return WindowStats.empty()

    def process(self, key: str, records: KeyRecords, state: WindowStats) -> WindowStats:
        if not len(records):
            return state
        return state.add(self.windows.pane_start(records.event_time), records.value, self.windows)

    def merge(self, earlier: WindowStats, later: WindowStats) -> WindowStats:
        return earlier.then(later)

    def emit(self, key: str, state: WindowStats, watermark_ms: int) -> tuple[list[WindowResult], WindowStats]:
        due = state.due(watermark_ms, self.windows)
        if not due:
            return [], state
        return state.head(due).results(key, self.windows), state.tail(due)

    def next_due(self, state: WindowStats) -> int | None:
        return int(state.starts[0]) + self.windows.size_ms if len(state) else None

    def is_empty(self, state: WindowStats) -> bool:
        return not len(state)

    def encode(self, state: WindowStats) -> bytes:
        """Tag and version, the window spec (so other windows refuse it), then the statistics."""
        return _HEADER.pack(_TAG, _VERSION) + self.windows.pack() + state.to_bytes()

    def decode(self, data: bytes | memoryview) -> WindowStats:
        if len(data) < _HEADER.size:
            raise ValueError(f"aggregate state: {len(data)} bytes is shorter than the header")
        tag, version = _HEADER.unpack_from(data, 0)
        if tag != _TAG:
            raise ValueError(f"not an aggregate state (tag {tag!r})")
        if version != _VERSION:
            raise ValueError(f"aggregate state: unknown encoding version {version}")
        windows, offset = WindowSpec.unpack(data, _HEADER.size)
        if windows != self.windows:
            raise ValueError(f"aggregate state was written for windows {windows}, not {self.windows}")
        state, offset = WindowStats.from_bytes(data, offset)
        if offset != len(data):
            raise ValueError(f"aggregate state: {len(data) - offset} bytes left over")
        return state


class AggregateBatch(BatchProcessor):
    """The aggregate on the batch path: rows (key, run, window) with count, sum, min and max."""

    name = "aggregate"
    mergeable = True

    def __init__(self, windows: WindowSpec) -> None:
        self.windows = windows

    def __repr__(self) -> str:
        return f"AggregateBatch({self.windows})"

    def columns(self) -> dict[str, Column]:
        return dict(STATS_COLUMNS)

    def fold(
        self, state: Table, key: np.ndarray, run: np.ndarray, event_time: np.ndarray, value: np.ndarray
    ) -> Table:
        records = record_rows(self.schema(), self.windows, key, run, event_time, value)
        return self._reduce(Table.concat([state, records]))

    def results(self, rows: Table) -> Results:
        c = rows.columns
        return Results(
            key=rows.key,
            window_start=rows.window,
            window_end=rows.window + self.windows.size_ms,
            count=c["count"],
            sum=c["sum"],
            min=c["min"],
            max=c["max"],
            revision=c["revision"],
            excluded=c["excluded"],
            run=rows.run,
        )
