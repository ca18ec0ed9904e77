"""The last n values per key and window, in input order: the order-dependent (non-mergeable) processor.

Why it cannot merge: which values are "last" depends on the order of *all* of a key's records. A
state built from the records after a move does not know how many records before the move it must
push out, so the engine has to buffer those records and replay them onto the old state instead.

Each window also reports count, sum, min, max and mean over all of its records (not only the last
n), with the same statistics code as the aggregate, so a result is useful on its own.
"""

from __future__ import annotations

import operator
import struct
from dataclasses import dataclass

import numpy as np

from spark_jobs.processors.batch import BatchProcessor, Results
from spark_jobs.processors.interface import KeyRecords, Processor, WindowResult
from spark_jobs.processors.table import Column, Table
from spark_jobs.processors.window_stats import STATS_COLUMNS, WindowStats, record_rows
from spark_jobs.processors.windows import WindowSpec

_HEADER = struct.Struct("<2sBQ")  # tag, version, n
_TAG = b"lv"
_VERSION = 1


@dataclass(frozen=True, eq=False)
class LastValuesState:
    """Statistics per window, and ``tail``: each window's last ``min(count, n)`` values.

    ``tail`` holds the windows one after the other in the order of ``stats.starts``, each oldest
    first. Why flat and not an (windows x n) matrix: no padding to store or ship, and the length of
    each window's run follows from its count.
    """

    stats: WindowStats
    tail: np.ndarray  # float64

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LastValuesState):
            return NotImplemented
        return self.stats == other.stats and np.array_equal(self.tail, other.tail)

    __hash__ = None  # type: ignore[assignment]


class LastValues(Processor[LastValuesState]):
    """Per key and window: the last ``n`` values (oldest first) plus statistics over all records."""

    name = "last_values"
    mergeable = False

    def __init__(self, n: int, windows: WindowSpec) -> None:
        if isinstance(n, bool) or operator.index(n) <= 0:
            raise ValueError(f"n must be a positive int, got {n!r}")
        self.n = operator.index(n)
        self.windows = windows

    def __repr__(self) -> str:
        return f"LastValues(n={self.n}, {self.windows})"

    def batch(self) -> LastValuesBatch:
        """The same processor on the batch path (the reduce engine uses this one)."""
        return LastValuesBatch(self.n, self.windows)

    def init(self) -> LastValuesState:
        return LastValuesState(WindowStats.empty(), np.empty(0, dtype=np.float64))

    def process(self, key: str, records: KeyRecords, state: LastValuesState) -> LastValuesState:
        """Fold the batch: statistics as the aggregate does, and a new tail per window.

        The tail is the last ``n`` of the held tail rows followed by the batch's (record, window)
        rows, per window. Why a pane filter first: a record among its window's last ``n`` is
        among its pane's last ``n`` too (its pane is part of the window), so with many records
        per pane only those candidates need copying into ``size / slide`` windows.
        """
        if not len(records):
            return state
        n, held = self.n, state.stats
        panes = self.windows.pane_start(records.event_time)
        stats = held.add(panes, records.value, self.windows)
        values = records.value
        if len(records) > n:
            candidates = _last_n(panes, n)
            if candidates.size < panes.size:
                candidates.sort()  # back to input order
                panes, values = panes[candidates], values[candidates]
        index, starts = self.windows.assign(panes)  # a pane start lies in its record's windows
        rows_start = np.concatenate((np.repeat(held.starts, np.minimum(held.count, n)), starts))
        rows_value = np.concatenate((state.tail, values[index]))
        return LastValuesState(stats, rows_value[_last_n(rows_start, n)])

    def emit(
        self, key: str, state: LastValuesState, watermark_ms: int
    ) -> tuple[list[WindowResult], LastValuesState]:
        due = state.stats.due(watermark_ms, self.windows)
        if not due:
            return [], state
        runs = np.minimum(state.stats.count[:due], self.n)
        bounds = np.cumsum(runs)
        cut = int(bounds[-1])
        emitted = state.tail[:cut].tolist()
        starts_at = [0, *bounds[:-1].tolist()]
        values = [tuple(emitted[a:b]) for a, b in zip(starts_at, bounds.tolist(), strict=True)]
        results = state.stats.head(due).results(key, self.windows, values)
        return results, LastValuesState(state.stats.tail(due), state.tail[cut:])

    def next_due(self, state: LastValuesState) -> int | None:
        stats = state.stats
        return int(stats.starts[0]) + self.windows.size_ms if len(stats) else None

    def is_empty(self, state: LastValuesState) -> bool:
        return not len(state.stats)

    def encode(self, state: LastValuesState) -> bytes:
        """Tag, version and n, the window spec, the statistics, then the tail values raw."""
        return b"".join(
            (
                _HEADER.pack(_TAG, _VERSION, self.n),
                self.windows.pack(),
                state.stats.to_bytes(),
                state.tail.astype("<f8", copy=False).tobytes(),
            )
        )

    def decode(self, data: bytes | memoryview) -> LastValuesState:
        if len(data) < _HEADER.size:
            raise ValueError(f"last_values state: {len(data)} bytes is shorter than the header")
        tag, version, n = _HEADER.unpack_from(data, 0)
        if tag != _TAG:
            raise ValueError(f"not a last_values state (tag {tag!r})")
        if version != _VERSION:
            raise ValueError(f"last_values state: unknown encoding version {version}")
        if n != self.n:
            raise ValueError(f"last_values state was written for n={n}, not n={self.n}")
        windows, offset = WindowSpec.unpack(data, _HEADER.size)
        if windows != self.windows:
            raise ValueError(f"last_values state was written for windows {windows}, not {self.windows}")
        stats, offset = WindowStats.from_bytes(data, offset)
        length = int(np.minimum(stats.count, n).sum())
        if len(data) != offset + 8 * length:
            raise ValueError(
                f"last_values state: {length} tail values need {offset + 8 * length} bytes, got {len(data)}"
            )
        tail = np.frombuffer(data, dtype="<f8", count=length, offset=offset).astype(np.float64, copy=False)
        return LastValuesState(stats, tail)


def _last_n(groups: np.ndarray, n: int) -> np.ndarray:
    """Indices of the last ``n`` rows of each group, group by group (ascending), input order within.

    A stable sort by group keeps input order within a group; a sorted row is among its group's
    last ``n`` when the row ``n`` places further on is in another group, or there is none.
    """
    order = np.argsort(groups, kind="stable")
    if order.size <= n:
        return order
    ordered = groups[order]
    keep = np.ones(order.size, dtype=bool)
    np.not_equal(ordered[:-n], ordered[n:], out=keep[:-n])
    return order[keep]


class LastValuesBatch(BatchProcessor):
    """Last values on the batch path: the aggregate's statistics per (key, run, window), and
    ``tail``: the window's last ``n`` values, oldest first (``tail_len`` of the row's ``n`` slots
    hold values)."""

    name = "last_values"
    mergeable = False

    def __init__(self, n: int, windows: WindowSpec) -> None:
        self.n = n
        self.windows = windows

    def __repr__(self) -> str:
        return f"LastValuesBatch(n={self.n}, {self.windows})"

    def columns(self) -> dict[str, Column]:
        return {
            **STATS_COLUMNS,
            "tail": Column("f8", None, width=self.n, fill=np.nan),
            "tail_len": Column("i4", None, fill=0),
        }

    def fold(
        self, state: Table, key: np.ndarray, run: np.ndarray, event_time: np.ndarray, value: np.ndarray
    ) -> Table:
        schema = self.schema()
        stats = record_rows(schema, self.windows, key, run, event_time, value)
        # the tails: only a record among the last n of its (key, run, pane) can be among the last n
        # of a window holding that pane, so the others are never copied into windows
        panes = self.windows.pane_start(event_time)
        pane_rows = Table.rows(schema, key, run, panes)
        if key.size > self.n:
            codes = np.lexsort((panes, pane_rows.identity_codes()))
            keep = _last_n_sorted(pane_rows, codes, self.n)
            keep.sort()  # back to input order
        else:
            keep = np.arange(key.size)
        index, starts = self.windows.assign(panes[keep])
        picked = keep[index]
        tails = np.full((picked.size, self.n), np.nan)
        tails[:, 0] = value[picked]
        tail_rows = Table.rows(
            schema,
            key[picked],
            run[picked],
            starts,
            count=np.zeros(picked.size, dtype=np.int64),
            sum=np.zeros(picked.size),
            tail=tails,
            tail_len=np.ones(picked.size, dtype=np.int32),
        )
        # statistics rows carry no tail; tail rows no statistics: the reduce joins them
        return self._reduce(Table.concat([state, stats, tail_rows]))

    def _reduce(self, table: Table) -> Table:
        reduced, order, bounds = table.reduce()
        if not len(table):
            return reduced
        lens = table.columns["tail_len"][order].astype(np.int64)
        tails = table.columns["tail"][order]
        groups = np.repeat(np.arange(bounds.size), np.diff(np.append(bounds, order.size)))
        mask = np.arange(self.n)[None, :] < lens[:, None]
        values = tails[mask]  # row-major: rows in order, each row's values oldest first
        value_group = np.repeat(groups, lens)
        kept = _last_n(value_group, self.n)  # by group, input order within
        kept_group = value_group[kept]
        counts = np.bincount(kept_group, minlength=bounds.size)
        first = np.concatenate(([0], np.cumsum(counts)[:-1]))
        position = np.arange(kept.size) - np.repeat(first, counts)
        out = np.full((bounds.size, self.n), np.nan)
        out[kept_group, position] = values[kept]
        reduced.columns["tail"] = out
        reduced.columns["tail_len"] = counts.astype(np.int32)
        return reduced

    def _excluded_rows(self, n: int) -> dict[str, np.ndarray]:
        return {"tail_len": np.zeros(n, dtype=np.int32)}

    def results(self, rows: Table) -> Results:
        c = rows.columns
        lens = c["tail_len"].tolist()
        values = [tuple(row[:k]) for row, k in zip(c["tail"].tolist(), lens, strict=True)]
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
            values=values,
            run=rows.run,
        )


def _last_n_sorted(rows: Table, order: np.ndarray, n: int) -> np.ndarray:
    """Indices (into ``rows``) of the last ``n`` rows of each (key, run, window) group, given the
    groups' stable sort ``order``."""
    codes = rows.identity_codes()[order]
    windows = rows.window[order]
    if order.size <= n:
        return order.copy()
    keep = np.ones(order.size, dtype=bool)
    keep[:-n] = (codes[:-n] != codes[n:]) | (windows[:-n] != windows[n:])
    return order[keep]
