"""State rows of many keys at once, in columns: the data structure of the batch path.

Why columns: the reduce's per-key path made one Python call, and one state decode and encode, per
key per micro-batch; with user or session ids as keys that is most of a batch's cost. Here a
worker's state is one table per storage bucket: one row per (key, run, window), each statistic a
numpy column. Folding a micro-batch is "append the batch's rows, stable-sort by (key, run,
window), reduce each run of equal rows" in a fixed number of numpy calls; emitting is a mask.

Identity of a row: ``key`` (str, object array), ``run`` (int64: the epoch the key's run at this
worker started, see the reduce engine) and ``window`` (int64 window start; processors without
windows use 0). Every other column is reduced by its :data:`Reducer` when equal rows combine:

* ``sum``, ``min``, ``max``: what the names say (``np.add`` / ``minimum`` / ``maximum.reduceat``);
* ``or``: logical or (flags such as "changed since last emitted");
* ``last``: the value of the last row (a later write wins);
* matrices (2-d columns) are reduced by the processor itself (see ``LastValues``).

Rows combine in row order (the sort is stable), so sums are accumulated in input order, the order
the exactness argument of :mod:`spark_jobs.processors.window_stats` is made in.

Storage: :meth:`Table.to_bytes` is a small header and each column raw (keys as UTF-8 with int32
offsets); decoding is ``np.frombuffer`` per column and one split of the key bytes. The header names
the columns written, and a column holding only its fill value is not written: a state saved or
shipped by an older version (fewer columns) loads with the newer columns at their fill, and columns
that are rarely used (the sampling terms of windows nothing was shed from) cost no bytes. The first
format (``BT1``, no names) wrote every column of its schema: the columns a schema added later say
so (:attr:`Column.since`), and read from a ``BT1`` table they take their fill.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd

Reducer = Literal["sum", "min", "max", "or", "last"]
IDENTITY = ("key", "run", "window")
_MAGIC_V1 = b"BT1"  # every column of the schema, in schema order
_MAGIC = b"BT2"  # the names of the columns written, then those columns
_U32 = struct.Struct("<I")
_U16 = struct.Struct("<H")


@dataclass(frozen=True)
class Column:
    """A state column: dtype, width (1: a vector; n: a matrix of n values per row) and reducer."""

    dtype: str
    reducer: Reducer | None = None  # None: reduced by the processor (matrices)
    width: int = 1
    fill: float | int = 0  # a new row's value
    since: int = 1  # the table format that first stored it (2: absent from BT1 tables, read as fill)


class Table:
    """Parallel columns; row i is (key[i], run[i], window[i], *columns[i])."""

    __slots__ = ("columns", "key", "run", "schema", "window")

    def __init__(
        self,
        schema: Mapping[str, Column],
        key: np.ndarray,
        run: np.ndarray,
        window: np.ndarray,
        columns: Mapping[str, np.ndarray],
    ) -> None:
        self.schema = dict(schema)
        self.key = key
        self.run = run
        self.window = window
        self.columns = dict(columns)

    # --- building --------------------------------------------------------------------------------

    @classmethod
    def empty(cls, schema: Mapping[str, Column]) -> Table:
        cols = {name: _zeros(c, 0) for name, c in schema.items()}
        return cls(
            schema, np.empty(0, dtype=object), np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64), cols
        )

    @classmethod
    def rows(
        cls,
        schema: Mapping[str, Column],
        key: np.ndarray,
        run: np.ndarray,
        window: np.ndarray,
        **given: np.ndarray,
    ) -> Table:
        """Rows with ``given`` columns; the others at their fill value."""
        n = len(key)
        cols = {name: given[name] if name in given else _filled(c, n) for name, c in schema.items()}
        unknown = set(given) - set(schema)
        if unknown:
            raise KeyError(f"columns {sorted(unknown)} are not in the schema")
        return cls(
            schema,
            np.asarray(key, dtype=object),
            np.asarray(run, dtype=np.int64),
            np.asarray(window, dtype=np.int64),
            cols,
        )

    def __len__(self) -> int:
        return int(self.key.size)

    def take(self, index: np.ndarray) -> Table:
        """Rows at ``index`` (an int array or a boolean mask), in that order."""
        return Table(
            self.schema,
            self.key[index],
            self.run[index],
            self.window[index],
            {n: c[index] for n, c in self.columns.items()},
        )

    @staticmethod
    def concat(parts: Sequence[Table]) -> Table:
        parts = [p for p in parts if len(p)] or list(parts[:1])
        if len(parts) == 1:
            return parts[0]
        first = parts[0]
        return Table(
            first.schema,
            np.concatenate([p.key for p in parts]),
            np.concatenate([p.run for p in parts]),
            np.concatenate([p.window for p in parts]),
            {n: np.concatenate([p.columns[n] for p in parts]) for n in first.schema},
        )

    # --- grouping --------------------------------------------------------------------------------

    def identity_codes(self) -> np.ndarray:
        """An int64 code per row, equal exactly for rows of one (key, run)."""
        return group_codes(self.key, self.run)

    def order(self) -> np.ndarray:
        """Stable order grouping equal (key, run) together, windows ascending within each."""
        if not len(self):
            return np.empty(0, dtype=np.int64)
        return np.lexsort((self.window, self.identity_codes()))

    def reduce(self) -> tuple[Table, np.ndarray, np.ndarray]:
        """Rows equal in (key, run, window) combined by their reducers; a (key, run)'s rows together,
        windows ascending.

        Also returns, for the processor's own columns (matrices), the sort ``order`` and the
        ``bounds`` of each group of equal rows in it.
        """
        if not len(self):
            return self, np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
        order = self.order()
        codes = self.identity_codes()[order]
        windows = self.window[order]
        first = np.empty(order.size, dtype=bool)
        first[0] = True
        first[1:] = (codes[1:] != codes[:-1]) | (windows[1:] != windows[:-1])
        bounds = np.flatnonzero(first)
        cols = {}
        for name, spec in self.schema.items():
            if spec.reducer is not None and _keeps_fill(spec) and _all_fill(self.columns[name], spec):
                cols[name] = _filled(spec, bounds.size)  # nothing to combine (sampling terms unshed)
                continue
            col = self.columns[name][order]
            if spec.reducer is None:
                cols[name] = col  # the processor reduces it (it has order and bounds)
            else:
                cols[name] = _REDUCE[spec.reducer](col, bounds)
        lead = order[bounds]
        out = Table(self.schema, self.key[lead], self.run[lead], self.window[lead], {})
        out.columns = cols
        return out, order, bounds

    # --- storage ---------------------------------------------------------------------------------

    def to_bytes(self) -> bytes:
        """Header (magic, rows, the names of the columns written), keys (int32 lengths and UTF-8),
        run, window, then each column written, raw (a column of bytes objects, dtype ``O``, as int32
        lengths and the bytes). Columns equal to their fill in every row are left out."""
        written = [name for name, spec in self.schema.items() if not _all_fill(self.columns[name], spec)]
        names = "\x00".join(written).encode("utf-8")
        parts = [_MAGIC, _U32.pack(len(self)), _U16.pack(len(written)), _U32.pack(len(names)), names]
        parts += _blobs([str(k).encode("utf-8") for k in self.key.tolist()])
        parts += [
            self.run.astype("<i8", copy=False).tobytes(),
            self.window.astype("<i8", copy=False).tobytes(),
        ]
        for name in written:
            spec, col = self.schema[name], self.columns[name]
            if spec.dtype == "O":
                parts += _blobs([bytes(b) for b in col.tolist()])
            else:
                parts.append(col.astype(np.dtype(spec.dtype).newbyteorder("<"), copy=False).tobytes())
        return b"".join(parts)

    @classmethod
    def from_bytes(cls, schema: Mapping[str, Column], data: bytes | memoryview) -> Table:
        """The table :meth:`to_bytes` wrote (or the first format wrote); columns of ``schema`` the
        bytes do not hold take their fill. A column the schema does not know is refused: the bytes
        were written for another processor (or by a newer version)."""
        view = memoryview(data)
        magic = bytes(view[:3])
        if magic not in (_MAGIC, _MAGIC_V1):
            raise ValueError("not a state table (bad magic)")
        (n,) = _U32.unpack_from(view, 3)
        offset = 3 + _U32.size
        if magic == _MAGIC_V1:
            written = [name for name, spec in schema.items() if spec.since <= 1]
        else:
            (count,) = _U16.unpack_from(view, offset)
            (size,) = _U32.unpack_from(view, offset + _U16.size)
            offset += _U16.size + _U32.size
            text = bytes(view[offset : offset + size]).decode("utf-8")
            offset += size
            written = text.split("\x00") if count else []
            unknown = [name for name in written if name not in schema]
            if len(written) != count or unknown:
                raise ValueError(f"state table: columns {unknown or written} are not this schema's")
        raw, offset = _unblobs(view, n, offset)
        key = np.empty(n, dtype=object)
        key[:] = [b.decode("utf-8") for b in raw]
        run = np.frombuffer(view, dtype="<i8", count=n, offset=offset).astype(np.int64)
        offset += 8 * n
        window = np.frombuffer(view, dtype="<i8", count=n, offset=offset).astype(np.int64)
        offset += 8 * n
        cols = {}
        for name in written:
            spec = schema[name]
            if spec.dtype == "O":
                blobs, offset = _unblobs(view, n, offset)
                col = np.empty(n, dtype=object)
                col[:] = blobs
                cols[name] = col
                continue
            dtype = np.dtype(spec.dtype).newbyteorder("<")
            count = n * spec.width
            col = np.frombuffer(view, dtype=dtype, count=count, offset=offset).astype(spec.dtype)
            offset += dtype.itemsize * count
            cols[name] = col.reshape(n, spec.width) if spec.width > 1 else col
        if offset != len(view):
            raise ValueError(f"state table: {len(view) - offset} bytes left over")
        cols = {name: cols[name] if name in cols else _filled(spec, n) for name, spec in schema.items()}
        return cls(schema, key, run, window, cols)


def group_codes(key: np.ndarray, run: np.ndarray) -> np.ndarray:
    """One int64 per (key, run), equal exactly for equal pairs (a hash factorisation: no string
    sort, whose cost would grow with the keys, not the rows)."""
    if not key.size:
        return np.empty(0, dtype=np.int64)
    key_codes, _uniques = pd.factorize(key, sort=False)
    if not run.any():
        return key_codes.astype(np.int64)
    run_codes, run_values = pd.factorize(run, sort=False)
    return key_codes.astype(np.int64) * len(run_values) + run_codes


def _blobs(items: list[bytes]) -> list[bytes]:
    """``items`` stored: their int32 lengths, then their bytes one after the other."""
    lengths = np.fromiter((len(b) for b in items), dtype="<i4", count=len(items))
    return [lengths.tobytes(), b"".join(items)]


def _unblobs(view: memoryview, n: int, offset: int) -> tuple[list[bytes], int]:
    lengths = np.frombuffer(view, dtype="<i4", count=n, offset=offset)
    offset += 4 * n
    ends = np.cumsum(lengths, dtype=np.int64) + offset
    starts = ends - lengths
    data = bytes(view[offset : int(ends[-1]) if n else offset])
    base = offset
    items = [data[a - base : b - base] for a, b in zip(starts.tolist(), ends.tolist(), strict=True)]
    return items, int(ends[-1]) if n else offset


def _all_fill(col: np.ndarray, c: Column) -> bool:
    """Whether every value of ``col`` is its fill (never for bytes columns: always written)."""
    if c.dtype == "O":
        return False
    return bool(np.all(col == c.fill))


def _keeps_fill(c: Column) -> bool:
    """Whether rows all at the fill value reduce to the fill value (a sum only when it is 0)."""
    return c.reducer != "sum" or c.fill == 0


def _zeros(c: Column, n: int) -> np.ndarray:
    shape = (n, c.width) if c.width > 1 else (n,)
    return np.zeros(shape, dtype=c.dtype)


def _filled(c: Column, n: int) -> np.ndarray:
    shape = (n, c.width) if c.width > 1 else (n,)
    if c.dtype == "O":
        col = np.empty(shape, dtype=object)
        col[...] = [c.fill] * n if n else []
        return col
    return np.full(shape, c.fill, dtype=c.dtype)


def _or(col: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    return np.maximum.reduceat(col, bounds)


def _last(col: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    ends = np.append(bounds[1:], col.shape[0]) - 1
    return col[ends]


_REDUCE = {
    "sum": lambda col, b: np.add.reduceat(col, b),
    "min": lambda col, b: np.minimum.reduceat(col, b),
    "max": lambda col, b: np.maximum.reduceat(col, b),
    "or": _or,
    "last": _last,
}
