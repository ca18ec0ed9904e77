"""Count, sum, min and max per window of one key, as parallel arrays sorted by window start.

Why one shared type: the aggregate's whole state is exactly this, and order-dependent processors
(last values) still report the same statistics over all of a window's records. Both fold records
the same way, so the exactness argument below is made once.

Why arrays and a single grouped reduce: a key holds a handful of open windows but may receive
thousands of records in a micro-batch. Folding is "concatenate the held rows and the new rows,
stable-sort by window start, reduce each run of equal starts" (with sliding windows the new
records are reduced per pane first, see :meth:`WindowStats.add`), a fixed number of numpy calls
whatever the batch size. Merging two partial states is the same reduce over both states' rows, so
``process`` and ``merge`` cannot drift apart.

Exactness: count, min and max are exact under any split of a key's records. The sum is a float
sum, and float addition is not associative: a sum built from two partial sums may differ from a
one-pass sum in the last bit. It is exact when every value, and every partial sum, is a dyadic
rational representable in 53 bits (e.g. multiples of 1/4 of moderate size), which is what the
exactness tests use; for other values results differ by rounding only. (Signed zeros are the one
other wrinkle: min(-0.0, 0.0) keeps whichever came first, so they compare equal but may differ in
sign.)
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from spark_jobs.processors.interface import WindowResult
from spark_jobs.processors.table import Column, Table
from spark_jobs.processors.windows import WindowSpec

_COUNT = struct.Struct("<Q")
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


@dataclass(frozen=True, eq=False)
class WindowStats:
    """Per-window statistics; entry i describes the window starting at ``starts[i]``.

    ``starts`` is strictly increasing, so the windows a watermark closes are always a prefix.
    """

    starts: np.ndarray  # int64
    count: np.ndarray  # int64
    sum: np.ndarray  # float64
    min: np.ndarray  # float64
    max: np.ndarray  # float64

    @classmethod
    def empty(cls) -> WindowStats:
        ints, floats = np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64)
        return cls(ints, ints, floats, floats, floats)

    def __len__(self) -> int:
        return int(self.starts.size)

    def __eq__(self, other: object) -> bool:
        """Numeric equality (so -0.0 == 0.0), the equality the merge guarantee is stated in."""
        if not isinstance(other, WindowStats):
            return NotImplemented
        return all(
            np.array_equal(getattr(self, f), getattr(other, f))
            for f in ("starts", "count", "sum", "min", "max")
        )

    __hash__ = None  # type: ignore[assignment]

    def add(self, panes: np.ndarray, values: np.ndarray, windows: WindowSpec) -> WindowStats:
        """These statistics followed by records, each given by its pane start and value, in input order.

        Tumbling windows are their own panes. Sliding windows first reduce the records per pane and
        then spread each pane over the ``size / slide`` windows that hold it (see
        :meth:`WindowSpec.pane_start`), so the cost grows with records plus panes, not records
        times windows; a sliding window's sum is then added pane by pane.
        """
        if panes.size == 0:
            return self
        ones = np.ones(panes.size, dtype=np.int64)
        if windows.tumbling:
            return self._append(panes, ones, values, values, values)
        rows = (panes, ones, values, values, values)
        batch = WindowStats(*rows) if panes.size == 1 else _reduce(*rows)  # one row: reduced already
        index, starts = windows.assign(batch.starts)
        return self._append(starts, batch.count[index], batch.sum[index], batch.min[index], batch.max[index])

    def then(self, later: WindowStats) -> WindowStats:
        """These statistics followed by ``later``'s (the merge of two partial states)."""
        if not len(later):
            return self
        if not len(self):
            return later
        return self._append(later.starts, later.count, later.sum, later.min, later.max)

    def _append(
        self, starts: np.ndarray, count: np.ndarray, total: np.ndarray, low: np.ndarray, high: np.ndarray
    ) -> WindowStats:
        if not len(self):
            return _reduce(starts, count, total, low, high)
        return _reduce(
            np.concatenate((self.starts, starts)),
            np.concatenate((self.count, count)),
            np.concatenate((self.sum, total)),
            np.concatenate((self.min, low)),
            np.concatenate((self.max, high)),
        )

    def due(self, watermark_ms: int, windows: WindowSpec) -> int:
        """How many leading windows have ``end <= watermark_ms`` (closed by that watermark)."""
        last_start = min(max(int(watermark_ms) - windows.size_ms, _INT64_MIN), _INT64_MAX)
        return int(np.searchsorted(self.starts, last_start, side="right"))

    def head(self, n: int) -> WindowStats:
        return WindowStats(self.starts[:n], self.count[:n], self.sum[:n], self.min[:n], self.max[:n])

    def tail(self, n: int) -> WindowStats:
        """Everything from window ``n`` on."""
        return WindowStats(self.starts[n:], self.count[n:], self.sum[n:], self.min[n:], self.max[n:])

    def results(
        self, key: str, windows: WindowSpec, values: Sequence[tuple[float, ...]] | None = None
    ) -> list[WindowResult]:
        """One result per window (a Python object per window, none per record).

        The mean is computed here, as ``sum / count``, so no partial state ever carries a rounded mean.
        """
        rows = zip(
            self.starts.tolist(),
            self.count.tolist(),
            self.sum.tolist(),
            self.min.tolist(),
            self.max.tolist(),
            strict=True,
        )
        return [
            WindowResult(
                key=key,
                window_start=start,
                window_end=start + windows.size_ms,
                count=count,
                sum=total,
                min=low,
                max=high,
                mean=total / count,
                values=values[i] if values is not None else (),
            )
            for i, (start, count, total, low, high) in enumerate(rows)
        ]

    def to_bytes(self) -> bytes:
        """Window count, then the five arrays raw (little-endian): 40 bytes a window."""
        return b"".join(
            (
                _COUNT.pack(len(self)),
                self.starts.astype("<i8", copy=False).tobytes(),
                self.count.astype("<i8", copy=False).tobytes(),
                self.sum.astype("<f8", copy=False).tobytes(),
                self.min.astype("<f8", copy=False).tobytes(),
                self.max.astype("<f8", copy=False).tobytes(),
            )
        )

    @classmethod
    def from_bytes(cls, data: bytes | memoryview, offset: int = 0) -> tuple[WindowStats, int]:
        """The statistics written at ``offset`` and the offset just past them."""
        if len(data) < offset + _COUNT.size:
            raise ValueError("truncated window statistics")
        (n,) = _COUNT.unpack_from(data, offset)
        offset += _COUNT.size
        if len(data) < offset + 40 * n:
            raise ValueError(f"truncated window statistics: {n} windows need {40 * n} bytes")
        arrays = []
        for dtype in ("<i8", "<i8", "<f8", "<f8", "<f8"):
            arrays.append(np.frombuffer(data, dtype=dtype, count=n, offset=offset))
            offset += 8 * n
        starts, count, total, low, high = arrays
        if n > 1 and not bool(np.all(starts[1:] > starts[:-1])):
            raise ValueError("window statistics: window starts are not strictly increasing")
        return (
            cls(
                starts.astype(np.int64, copy=False),
                count.astype(np.int64, copy=False),
                total.astype(np.float64, copy=False),
                low.astype(np.float64, copy=False),
                high.astype(np.float64, copy=False),
            ),
            offset,
        )


def _reduce(
    starts: np.ndarray, count: np.ndarray, total: np.ndarray, low: np.ndarray, high: np.ndarray
) -> WindowStats:
    """Group rows by window start and combine each group; rows of one window combine in row order.

    The sort is stable, so within a window earlier rows (the held state, the earlier partial state)
    come before later ones, and ``np.add.reduceat`` adds each run left to right (no pairwise
    reordering), so a sum over record rows is accumulated in input order.
    """
    order = np.argsort(starts, kind="stable")
    s = starts[order]
    first = np.empty(s.size, dtype=bool)
    first[0] = True
    np.not_equal(s[1:], s[:-1], out=first[1:])
    bounds = np.flatnonzero(first)
    return WindowStats(
        s[bounds],
        np.add.reduceat(count[order], bounds),
        np.add.reduceat(total[order], bounds),
        np.minimum.reduceat(low[order], bounds),
        np.maximum.reduceat(high[order], bounds),
    )


# --- the batch path: the same statistics for the records of many keys at once ---------------------

STATS_COLUMNS = {
    "count": Column("i8", "sum", fill=0),
    "sum": Column("f8", "sum", fill=0.0),
    "min": Column("f8", "min", fill=np.inf),
    "max": Column("f8", "max", fill=-np.inf),
}


def record_rows(
    schema: Mapping[str, Column],
    windows: WindowSpec,
    key: np.ndarray,
    run: np.ndarray,
    event_time: np.ndarray,
    value: np.ndarray,
) -> Table:
    """The statistics rows of records of many (key, run)s: one row per (record, window) for
    tumbling windows; for sliding ones the records are first reduced per (key, run, pane), then
    each pane row is spread over the ``size / slide`` windows holding it (see
    :meth:`WindowSpec.pane_start`), so the rows grow with records plus panes, not records times
    windows. Rows keep input order within each (key, run, window)."""
    panes = windows.pane_start(event_time)
    n = panes.size
    ones = np.ones(n, dtype=np.int64)
    rows = Table.rows(schema, key, run, panes, count=ones, sum=value, min=value, max=value)
    if windows.tumbling or n == 0:
        return rows
    reduced, _order, _bounds = rows.reduce()
    index, starts = windows.assign(reduced.window)
    return Table(
        schema,
        reduced.key[index],
        reduced.run[index],
        starts,
        {name: col[index] for name, col in reduced.columns.items()},
    )
