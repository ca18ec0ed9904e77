"""The batch path: a processor that folds a whole micro-batch of many keys in a few numpy calls.

Why a second contract beside the per-key one (:mod:`spark_jobs.processors.interface`): the per-key
contract costs one Python call and one state decode/encode per key per micro-batch, which is most
of a batch's time when keys are many (user or session ids). A :class:`BatchProcessor` sees the
worker's records of a batch at once, as columns, and keeps its state as a
:class:`~spark_jobs.processors.table.Table` of (key, run, window) rows. The built-in processors
implement both contracts; a user's processor may implement only the per-key one and is run through
:class:`PerKeyAdapter` (correct, as fast as the per-key path was).

The engine (``spark_jobs.reduce``) owns three columns of every row, besides the processor's own:

* ``excluded``: records of the window that were *not* counted (late, refused), so a result says
  what it left out;
* ``dirty``: the row changed since it was last emitted (records folded in, a partial state merged,
  an exclusion counted);
* ``revision``: how many times the row was emitted, minus one (-1: never). A row emitted again
  (a late record counted, a state merged after a move) is a *correction*: same window, same
  Kafka key, revision one higher; a reader that keeps the latest row per key keeps the last one.
* ``shed_keep``: the lowest keep-probability under which records of the row may have been shed
  without being seen, as the workers its state passed through knew it (shed spans a router
  reported, or a per-key state's history of settings): a row is exact only if it is 1;
* the sampling terms (:data:`~spark_jobs.processors.sampling.SAMPLING_COLUMNS`): sums over the
  row's records that were kept by load shedding with a probability below 1, from which each result
  states its Horvitz–Thompson estimates and their error (zero, and not even stored, while nothing
  is shed).

Windowed rows are emitted once the watermark reaches their window's end, and kept (clean) until
``window end + horizon``, so a late record within the horizon can still be counted in a correction.
"""

from __future__ import annotations

import abc
import itertools
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from spark_jobs.processors.interface import KeyRecords, Processor, WindowResult
from spark_jobs.processors.sampling import SAMPLING_COLUMNS, SamplingTerms
from spark_jobs.processors.table import Column, Table
from spark_jobs.processors.windows import WindowSpec

ENGINE_COLUMNS: dict[str, Column] = {
    "excluded": Column("i8", "sum", fill=0),
    "dirty": Column("i1", "or", fill=1),
    "revision": Column("i4", "max", fill=-1),
    # the lowest keep-probability under which records of this row may have been shed unseen, as
    # known where the row's state was before (it travels in state chunks); 1.0: none
    "shed_keep": Column("f8", "min", fill=1.0, since=2),
    **SAMPLING_COLUMNS,
}
NEVER = np.iinfo(np.int64).max  # a due time that never comes


@dataclass
class Results:
    """Emitted rows, as columns (one entry per (key, window)); ``values`` only for processors that
    report per-record detail (last values); ``terms``: the rows' sampling terms (None: nothing of
    them was shed), attached by :meth:`BatchProcessor.emit` from the engine's columns."""

    key: np.ndarray
    window_start: np.ndarray
    window_end: np.ndarray
    count: np.ndarray
    sum: np.ndarray
    min: np.ndarray
    max: np.ndarray
    revision: np.ndarray
    excluded: np.ndarray
    values: list[tuple[float, ...]] | None = None
    run: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    terms: SamplingTerms | None = None
    shed_keep: np.ndarray | None = None  # the rows' ``shed_keep`` column (None: all 1.0)

    def __len__(self) -> int:
        return int(self.key.size)

    def sampling(self) -> SamplingTerms:
        """The rows' sampling terms (zeros when nothing was shed)."""
        return self.terms if self.terms is not None else SamplingTerms.zeros(len(self))

    @staticmethod
    def concat(parts: Sequence[Results]) -> Results:
        parts = [p for p in parts if len(p)]
        if not parts:
            return Results.empty()
        if len(parts) == 1:
            return parts[0]
        values = None
        if any(p.values is not None for p in parts):
            values = [v for p in parts for v in (p.values or [()] * len(p))]
        fields_ = (
            "key",
            "window_start",
            "window_end",
            "count",
            "sum",
            "min",
            "max",
            "revision",
            "excluded",
            "run",
        )
        joined = {f: np.concatenate([getattr(p, f) for p in parts]) for f in fields_}
        terms = None
        if any(p.terms is not None for p in parts):
            terms = SamplingTerms.concat([p.sampling() for p in parts])
        shed_keep = None
        if any(p.shed_keep is not None for p in parts):
            shed_keep = np.concatenate([p.carried_keep() for p in parts])
        return Results(**joined, values=values, terms=terms, shed_keep=shed_keep)

    def carried_keep(self) -> np.ndarray:
        """The rows' ``shed_keep`` (ones when none was attached)."""
        return self.shed_keep if self.shed_keep is not None else np.ones(len(self), dtype=np.float64)

    @staticmethod
    def empty() -> Results:
        i, f = np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64)
        return Results(np.empty(0, dtype=object), i, i, i, f, f, f, i.astype(np.int32), i, None, i)

    def rows(self) -> list[WindowResult]:
        """One :class:`WindowResult` per row (tests and per-key comparisons)."""
        out = []
        for i in range(len(self)):
            count, total = int(self.count[i]), float(self.sum[i])
            out.append(
                WindowResult(
                    key=str(self.key[i]),
                    window_start=int(self.window_start[i]),
                    window_end=int(self.window_end[i]),
                    count=count,
                    sum=total,
                    min=float(self.min[i]) if count else None,
                    max=float(self.max[i]) if count else None,
                    mean=total / count if count else None,
                    values=self.values[i] if self.values is not None else (),
                )
            )
        return out


class BatchProcessor(abc.ABC):
    """A processor over windowed (key, run, window) rows; see the module docstring."""

    name: ClassVar[str]
    mergeable: ClassVar[bool]
    windowed: ClassVar[bool] = True  # rows are (key, run, window); False: one opaque row per (key, run)
    windows: WindowSpec

    @abc.abstractmethod
    def columns(self) -> dict[str, Column]:
        """The processor's own state columns (the engine adds :data:`ENGINE_COLUMNS`)."""

    def schema(self) -> dict[str, Column]:
        return {**self.columns(), **ENGINE_COLUMNS}

    def empty(self) -> Table:
        return Table.empty(self.schema())

    @abc.abstractmethod
    def fold(
        self, state: Table, key: np.ndarray, run: np.ndarray, event_time: np.ndarray, value: np.ndarray
    ) -> Table:
        """``state`` followed by the records (parallel arrays, in input order), reduced.

        ``state`` holds the rows of (some of) the records' (key, run)s and maybe others; the result
        has one row per (key, run, window), a (key, run)'s rows together, windows ascending. Rows a
        record touches are dirty.
        """

    def merge(self, earlier: Table, later: Table) -> Table:
        """Rows of one (key, run) from two partial states: as if ``later``'s records followed
        ``earlier``'s. Only mergeable processors are asked."""
        if not self.mergeable:
            raise TypeError(f"processor {self.name!r} is not mergeable")
        return self._reduce(Table.concat([earlier, later]))

    def combine(self, table: Table) -> Table:
        """Rows equal in (key, run, window) combined, earlier rows first (exclusion-only rows of a
        non-mergeable processor into its state, say): what ``fold`` and ``merge`` end with."""
        return self._reduce(table)

    def _reduce(self, table: Table) -> Table:
        reduced, _order, _bounds = table.reduce()
        return reduced

    @abc.abstractmethod
    def results(self, rows: Table) -> Results:
        """The result of each row (count, sum, min, max; per-record detail if any)."""

    # --- storage: which bucket a row lives in ----------------------------------------------------

    def bucket_of_rows(self, rows: Table) -> np.ndarray:
        """A windowed row lives in its window's bucket, so a window's rows are dropped together."""
        return rows.window

    def buckets_of_records(self, key: np.ndarray, event_time: np.ndarray) -> np.ndarray:
        """The buckets records touch (with repeats): their windows."""
        _index, starts = self.windows.assign(event_time)
        return starts

    # --- windows (the same for every windowed processor) -----------------------------------------

    def window_end(self, rows: Table) -> np.ndarray:
        return rows.window + self.windows.size_ms

    def due(self, rows: Table) -> np.ndarray:
        """When each row next needs emitting: its window's end if it changed since its last
        emission, else never."""
        end = self.window_end(rows)
        return np.where(rows.columns["dirty"].astype(bool), end, NEVER)

    def emit(self, rows: Table, watermark_ms: int, may_emit: np.ndarray) -> tuple[Results, Table]:
        """Rows due by ``watermark_ms`` (and allowed by ``may_emit``) as results; the rows after.

        Emitted rows stay (clean, their revision counted) until the engine drops them past the
        correction horizon.
        """
        due = (self.due(rows) <= watermark_ms) & may_emit
        if not due.any():
            return Results.empty(), rows
        idx = np.flatnonzero(due)
        rows.columns["revision"] = rows.columns["revision"].copy()
        rows.columns["revision"][idx] += 1
        rows.columns["dirty"] = rows.columns["dirty"].copy()
        rows.columns["dirty"][idx] = 0
        emitted = rows.take(idx)
        results = self.results(emitted)
        if emitted.columns["sampled"].any():
            results.terms = SamplingTerms.of_rows(emitted)
        carried = emitted.columns["shed_keep"]
        if (carried < 1.0).any():
            results.shed_keep = np.asarray(carried, dtype=np.float64)
        return results, rows

    def exclude(self, rows: Table, key: np.ndarray, run: np.ndarray, window: np.ndarray) -> Table:
        """Count records left out (late, refused) in the rows of their windows: one (key, run,
        window start) per record and window, ``excluded`` +1 each, the row dirty (a correction is
        due). A window the state no longer holds gets a row that counts only the exclusion."""
        extra = self.side_rows(key, run, window, excluded=np.ones(key.size, dtype=np.int64))
        return self._reduce(Table.concat([rows, extra]))

    def side_rows(self, key: np.ndarray, run: np.ndarray, window: np.ndarray, **engine: np.ndarray) -> Table:
        """Dirty rows that aggregate no record and carry only ``engine`` columns (an exclusion, the
        sampling terms of shed records), to be combined into the rows of their (key, run, window)."""
        return Table.rows(
            self.schema(),
            key,
            run,
            window,
            dirty=np.ones(key.size, dtype=np.int8),
            **engine,
            **self._excluded_rows(key.size),
        )

    def _excluded_rows(self, n: int) -> dict[str, np.ndarray]:
        """Processor columns of a row that aggregates nothing (an exclusion, sampling terms)."""
        return {}


class PerKeyAdapter(BatchProcessor):
    """A per-key :class:`~spark_jobs.processors.interface.Processor` on the batch path.

    One row per (key, run) holding the processor's encoded state (``blob``) and its next due
    time; folding, merging and emitting call the per-key methods once per (key, run) touched,
    as the per-key path always did. The windows of the opaque state are the processor's own, so
    the engine cannot count an exclusion in a window's row here: late records of such a processor
    are dead-lettered and counted in the worker's statistics only.
    """

    mergeable = False
    windowed = False

    def __init__(self, processor: Processor, bins: int = 64) -> None:
        self.processor = processor
        self.name = processor.name  # type: ignore[misc]
        self.mergeable = processor.mergeable  # type: ignore[misc]
        self.windows = getattr(processor, "windows", WindowSpec(1))
        self.bins = bins

    def __repr__(self) -> str:
        return f"PerKeyAdapter({self.processor!r})"

    def columns(self) -> dict[str, Column]:
        return {"blob": Column("O", "last", fill=b""), "next_due": Column("i8", "last", fill=NEVER)}

    def bucket_of_rows(self, rows: Table) -> np.ndarray:
        """Opaque states live in hash bins of their key (their windows are the processor's own)."""
        return _bins(rows.key, self.bins)

    def buckets_of_records(self, key: np.ndarray, event_time: np.ndarray) -> np.ndarray:
        return _bins(key, self.bins)

    def _states(self, rows: Table) -> dict[tuple[str, int], Any]:
        p = self.processor
        return {
            (str(k), int(r)): (p.decode(b) if b else p.init())
            for k, r, b in zip(
                rows.key.tolist(), rows.run.tolist(), rows.columns["blob"].tolist(), strict=True
            )
        }

    def _table(self, states: dict[tuple[str, int], Any], dirty: set[tuple[str, int]], old: Table) -> Table:
        p = self.processor
        revision = {
            (str(k), int(r)): int(v)
            for k, r, v in zip(old.key, old.run, old.columns["revision"], strict=True)
        }
        carried: dict[tuple[str, int], float] = {}  # shed_keep survives folding, merging, emitting
        shed = old.columns["shed_keep"].tolist()
        for k, r, v in zip(old.key.tolist(), old.run.tolist(), shed, strict=True):
            if v < 1.0:
                ident = (str(k), int(r))
                carried[ident] = min(v, carried.get(ident, 1.0))
        items = [(k, r, s) for (k, r), s in states.items() if not p.is_empty(s)]
        n = len(items)
        key = np.empty(n, dtype=object)
        key[:] = [k for k, _, _ in items]
        blob = np.empty(n, dtype=object)
        blob[:] = [p.encode(s) for _, _, s in items]
        nxt = [p.next_due(s) for _, _, s in items]
        return Table.rows(
            self.schema(),
            key,
            np.array([r for _, r, _ in items], dtype=np.int64),
            np.zeros(n, dtype=np.int64),
            blob=blob,
            next_due=np.array([NEVER if d is None else int(d) for d in nxt], dtype=np.int64),
            dirty=np.array([1 if (k, r) in dirty else 0 for k, r, _ in items], dtype=np.int8),
            revision=np.array([revision.get((k, r), -1) for k, r, _ in items], dtype=np.int32),
            shed_keep=np.array([carried.get((k, r), 1.0) for k, r, _ in items], dtype=np.float64),
        )

    def fold(
        self, state: Table, key: np.ndarray, run: np.ndarray, event_time: np.ndarray, value: np.ndarray
    ) -> Table:
        # only the (key, run)s with records are decoded and encoded again; the others pass through
        wanted = set(zip(key.tolist(), run.tolist(), strict=True))
        hit = np.fromiter(
            ((k, r) in wanted for k, r in zip(state.key.tolist(), state.run.tolist(), strict=True)),
            dtype=bool,
            count=len(state),
        )
        untouched = state.take(np.flatnonzero(~hit))
        state = state.take(np.flatnonzero(hit))
        states = self._states(state)
        touched: set[tuple[str, int]] = set()
        if key.size:
            codes = Table.rows(self.schema(), key, run, np.zeros(key.size, dtype=np.int64)).identity_codes()
            order = np.argsort(codes, kind="stable")
            first = np.flatnonzero(np.r_[True, codes[order][1:] != codes[order][:-1]])
            bounds = np.append(first, order.size)
            for a, b in itertools.pairwise(bounds):
                idx = order[a:b]
                ident = (str(key[idx[0]]), int(run[idx[0]]))
                state_of = states.get(ident)
                state_of = self.processor.init() if state_of is None else state_of
                states[ident] = self.processor.process(
                    ident[0], KeyRecords(event_time[idx], value[idx]), state_of
                )
                touched.add(ident)
        return Table.concat([untouched, self._table(states, touched, state)])

    def merge(self, earlier: Table, later: Table) -> Table:
        if not self.processor.mergeable:
            raise TypeError(f"processor {self.name!r} is not mergeable")
        a, b = self._states(earlier), self._states(later)
        merged = {
            k: (self.processor.merge(a[k], b[k]) if k in a and k in b else a.get(k, b.get(k))) for k in a | b
        }
        return self._table(merged, set(b), Table.concat([earlier, later]))

    def due(self, rows: Table) -> np.ndarray:
        return rows.columns["next_due"]

    def emit(self, rows: Table, watermark_ms: int, may_emit: np.ndarray) -> tuple[Results, Table]:
        due = (self.due(rows) <= watermark_ms) & may_emit
        if not due.any():
            return Results.empty(), rows
        states = self._states(rows)
        out: list[WindowResult] = []
        runs: list[int] = []
        carried: list[float] = []
        kept = rows.columns["shed_keep"]
        for i in np.flatnonzero(due).tolist():
            ident = (str(rows.key[i]), int(rows.run[i]))
            results, states[ident] = self.processor.emit(ident[0], states[ident], watermark_ms)
            out += results
            runs += [ident[1]] * len(results)
            carried += [float(kept[i])] * len(results)
        emitted = results_of(out, runs)
        if any(k < 1.0 for k in carried):
            emitted.shed_keep = np.array(carried, dtype=np.float64)
        return emitted, self._table(states, set(), rows)

    def results(self, rows: Table) -> Results:  # pragma: no cover - emit() above does it per key
        raise NotImplementedError

    def exclude(self, rows: Table, key: np.ndarray, run: np.ndarray, window: np.ndarray) -> Table:
        return rows  # no windows the engine can see (see the class docstring)


def _bins(key: np.ndarray, bins: int) -> np.ndarray:
    """Stable across processes and restarts (Python's ``hash`` is salted)."""
    return np.fromiter(
        (zlib.crc32(str(k).encode("utf-8")) % bins for k in key.tolist()), dtype=np.int64, count=key.size
    )


def results_of(rows: Sequence[WindowResult], runs: Sequence[int] | None = None) -> Results:
    """Per-key results as columns (first emissions: revision 0, nothing excluded)."""
    n = len(rows)
    if not n:
        return Results.empty()
    key = np.empty(n, dtype=object)
    key[:] = [r.key for r in rows]
    nan = float("nan")
    return Results(
        key=key,
        window_start=np.array([r.window_start for r in rows], dtype=np.int64),
        window_end=np.array([r.window_end for r in rows], dtype=np.int64),
        count=np.array([r.count for r in rows], dtype=np.int64),
        sum=np.array([r.sum for r in rows], dtype=np.float64),
        min=np.array([nan if r.min is None else r.min for r in rows], dtype=np.float64),
        max=np.array([nan if r.max is None else r.max for r in rows], dtype=np.float64),
        revision=np.zeros(n, dtype=np.int32),
        excluded=np.zeros(n, dtype=np.int64),
        values=[tuple(r.values) for r in rows] if any(r.values for r in rows) else None,
        run=np.array(list(runs) if runs is not None else [0] * n, dtype=np.int64),
    )


def batch_processor(processor: Processor | BatchProcessor) -> BatchProcessor:
    """The batch path of ``processor``: itself when it has one, else the per-key adapter."""
    if isinstance(processor, BatchProcessor):
        return processor
    batch = getattr(processor, "batch", None)
    if callable(batch):
        return batch()
    return PerKeyAdapter(processor)
