"""A step's working copy of what its worker stores: buckets and held records, read lazily and
written back once, at the end of the step.

Why apart: a step touches the buckets its records, installs and due windows name, never the
whole state (docs/reduce.md, "State"); which of them are loaded, which changed, and what each
stored bucket's times are in the meta (when it next needs a look) is one concern, kept apart
from what the step decides. Held records are appended to the store without reading them back
until a step needs them (an install), then replaced once.

A mixin of :class:`~spark_jobs.reduce.engine.WorkerStep` (its processor, store and meta are the
step's).
"""

from __future__ import annotations

import numpy as np

from spark_jobs.processors.batch import NEVER
from spark_jobs.processors.table import Table
from spark_jobs.reduce.store import HeldRecords
from spark_jobs.reduce.worker_meta import Bucket


class StepStorage:
    """Loaded buckets, dirty buckets, held records (module docstring); mixed into ``WorkerStep``."""

    def _init_storage(self) -> None:
        self._loaded: dict[int, Table] = {}
        self._dirty: set[int] = set()
        self._all_loaded = False
        self._held: HeldRecords | None = None  # the store's held records, once a step reads them
        self._held_dirty = False

    def _bucket(self, b: int) -> Table:
        table = self._loaded.get(b)
        if table is None:
            blob = self.store.get_bucket(b) if b in self.meta.buckets else None
            table = Table.from_bytes(self.schema, blob) if blob else Table.empty(self.schema)
            self._loaded[b] = table
        return table

    def _load_all(self) -> None:
        if not self._all_loaded:
            for b in list(self.meta.buckets):
                self._bucket(b)
            self._all_loaded = True

    def _all_rows(self) -> Table:
        self._load_all()
        return Table.concat(
            [self._bucket(int(b)) for b in sorted(self._loaded)] or [Table.empty(self.schema)]
        )

    def _put_rows(self, rows: Table, buckets: set[int]) -> None:
        """``rows`` become the contents of ``buckets`` (each row into its own bucket)."""
        ids = self.processor.bucket_of_rows(rows)
        order = np.argsort(ids, kind="stable")
        ids_sorted = ids[order]
        present = set(np.unique(ids_sorted).tolist())
        for b in buckets | present:
            lo, hi = np.searchsorted(ids_sorted, [b, b + 1])
            self._loaded[b] = rows.take(order[lo:hi])
            self._dirty.add(b)

    def _add_rows(self, rows: Table) -> None:
        """``rows`` (of (key, run)s the buckets do not hold) added to their buckets."""
        ids = self.processor.bucket_of_rows(rows)
        for b in np.unique(ids).tolist():
            self._loaded[b] = Table.concat([self._bucket(b), rows.take(np.flatnonzero(ids == b))])
            self._dirty.add(b)

    def _all_held(self) -> HeldRecords:
        """Every held record, read from the store once a step (installs take from this copy)."""
        if self._held is None:
            self._held = self.store.held()
        return self._held

    def _holds_any(self) -> bool:
        return any(e.held for runs in self.meta.pending.values() for e in runs.values())

    def _flush(self) -> None:
        if self._held_dirty and self._held is not None:
            self.store.replace_held(self._held)
        meta_buckets = self.meta.buckets
        for b in sorted(self._dirty):
            table = self._loaded[b]
            if not len(table):
                if b in meta_buckets:
                    self.store.remove_bucket(b)
                    del meta_buckets[b]
                continue
            blob = table.to_bytes()
            self.store.put_bucket(b, blob)
            due, expire = self._bucket_times(table)
            meta_buckets[int(b)] = Bucket(int(due), int(expire), len(table), len(blob))

    def _bucket_times(self, table: Table) -> tuple[int, int]:
        """When the bucket next needs a look: its earliest row due for emission (rows of runs that
        cannot emit now do not count: an install looks at every bucket), and the earliest a row
        may be dropped past the horizon."""
        may = self._may_emit(table)
        dues = self.processor.due(table)[may]
        due = int(dues.min()) if dues.size else NEVER
        expire = self._expiry(table)
        expire_any = int(expire[may].min()) if may.any() else NEVER
        return due, expire_any

    def _expiry(self, table: Table) -> np.ndarray:
        if not self.processor.windowed:
            return np.full(len(table), NEVER, dtype=np.int64)
        return self.processor.window_end(table) + int(self.config.horizon_ms)

    def _hold(
        self,
        keys: np.ndarray,
        runs: np.ndarray,
        seq: np.ndarray,
        t: np.ndarray,
        v: np.ndarray,
        keep: np.ndarray,
    ) -> None:
        if not keys.size:
            return
        block = HeldRecords(keys, runs, seq, t, v, keep)
        if self._held is None:
            self.store.append_held(block)  # one call, nothing read back
        else:
            self._held = HeldRecords.concat([self._held, block])
            self._held_dirty = True
