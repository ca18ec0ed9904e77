"""Where a worker keeps its state between micro-batches: Spark's state store in the job, a dict in tests.

Why this shape (one map of buckets, one list of held records, one map of chunk pieces): Spark's
state API costs one call into the JVM per get or put (0.1-1 ms each here, measured), so state is
grouped into a few large entries, read only when a batch needs them:

* ``buckets``: bucket id -> the encoded rows (:class:`~spark_jobs.processors.table.Table`) of one
  window start (or one hash bin, for per-key processors). A window's rows are dropped together
  once the watermark passes its end plus the correction horizon: state follows open windows.
* ``held``: records of keys whose state has not arrived yet, for processors that cannot merge, as
  blocks (block id -> the encoded records one batch held): a batch *adds* one block (one call),
  instead of rewriting what a hot key already holds (which made holding quadratic); they are read
  when a state arrives. Not Spark's list state: its RocksDB ``appendList`` merges one element at a
  time and reads the whole list back at each merge (to count keys), so appending to a list of n
  records costs O(n) per element: a 2,000-record list took seconds a batch, growing (measured,
  Spark 4.0).
* ``pieces``: parts of a state chunk that came in several records, until the last part arrives.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from spark_jobs.processors.table import Column, Table

# keep: the probability the record was kept with by load shedding (1.0 in blocks held before it was stored)
_HELD_COLUMNS = {
    "event_time": Column("int64"),
    "value": Column("float64"),
    "keep": Column("float64", fill=1.0, since=2),
}


_FIELDS = ("key", "run", "seq", "event_time", "value", "keep")


class HeldRecords:
    """Records held for runs waiting for their state: parallel columns, ``seq`` keeps input order;
    ``keep``: each record's keep-probability (its sampling terms are added when it is replayed)."""

    __slots__ = ("event_time", "keep", "key", "run", "seq", "value")

    def __init__(
        self,
        key: np.ndarray,
        run: np.ndarray,
        seq: np.ndarray,
        event_time: np.ndarray,
        value: np.ndarray,
        keep: np.ndarray | None = None,
    ) -> None:
        self.key = key
        self.run = run
        self.seq = seq
        self.event_time = event_time
        self.value = value
        self.keep = np.ones(key.size, dtype=np.float64) if keep is None else keep

    @classmethod
    def empty(cls) -> HeldRecords:
        i = np.empty(0, dtype=np.int64)
        f = np.empty(0, dtype=np.float64)
        return cls(np.empty(0, dtype=object), i, i, i, f, f)

    def __len__(self) -> int:
        return int(self.key.size)

    def take(self, index: np.ndarray) -> HeldRecords:
        return HeldRecords(*(getattr(self, f)[index] for f in _FIELDS))

    def to_bytes(self) -> bytes:
        """One block (a :class:`~spark_jobs.processors.table.Table`: key, run, seq as its window)."""
        columns = {"event_time": self.event_time, "value": self.value, "keep": self.keep}
        return Table(_HELD_COLUMNS, self.key, self.run, self.seq, columns).to_bytes()

    @classmethod
    def from_bytes(cls, blob: bytes | memoryview) -> HeldRecords:
        t = Table.from_bytes(_HELD_COLUMNS, blob)
        c = t.columns
        return cls(t.key, t.run, t.window, c["event_time"], c["value"], c["keep"])

    @classmethod
    def concat(cls, parts: list[HeldRecords]) -> HeldRecords:
        """The parts as one, in input order (``seq``)."""
        parts = [p for p in parts if len(p)]
        if not parts:
            return cls.empty()
        joined = cls(*(np.concatenate([getattr(p, f) for p in parts]) for f in _FIELDS))
        return joined.take(np.argsort(joined.seq, kind="stable"))

    def tuples(self) -> list[tuple[str, int, int, int, float, float]]:
        return list(zip(*(getattr(self, f).tolist() for f in _FIELDS), strict=True))

    @classmethod
    def of(cls, rows: list[tuple[str, int, int, int, float, float]]) -> HeldRecords:
        """Records from (key, run, seq, event_time, value, keep) tuples (keep may be left out: 1.0)."""
        if not rows:
            return cls.empty()
        key = np.empty(len(rows), dtype=object)
        key[:] = [r[0] for r in rows]
        keep = np.array([r[5] if len(r) > 5 else 1.0 for r in rows], dtype=np.float64)
        return cls(
            key,
            np.array([r[1] for r in rows], dtype=np.int64),
            np.array([r[2] for r in rows], dtype=np.int64),
            np.array([r[3] for r in rows], dtype=np.int64),
            np.array([r[4] for r in rows], dtype=np.float64),
            keep,
        )


class StateStore(Protocol):
    """A worker's storage; every call may cost a trip into the JVM."""

    def get_bucket(self, bucket: int) -> bytes | None: ...

    def put_bucket(self, bucket: int, blob: bytes) -> None: ...

    def remove_bucket(self, bucket: int) -> None: ...

    def append_held(self, held: HeldRecords) -> None: ...

    def held(self) -> HeldRecords: ...

    def replace_held(self, held: HeldRecords) -> None: ...

    def get_piece(self, name: str) -> bytes | None: ...

    def put_piece(self, name: str, blob: bytes) -> None: ...

    def remove_piece(self, name: str) -> None: ...


class DictStore:
    """A :class:`StateStore` in memory (unit tests, and the reference for the Spark adapter)."""

    def __init__(self) -> None:
        self.buckets: dict[int, bytes] = {}
        self.held_rows: list[tuple[str, int, int, int, float, float]] = []
        self.pieces: dict[str, bytes] = {}
        self.calls = 0  # trips a real store would make into the JVM
        self.written = 0  # bytes handed to the store (what a real one would encode and commit)
        self.reads_held = 0  # times the held records were read back

    def get_bucket(self, bucket: int) -> bytes | None:
        self.calls += 1
        return self.buckets.get(bucket)

    def put_bucket(self, bucket: int, blob: bytes) -> None:
        self.calls += 1
        self.written += len(blob)
        self.buckets[bucket] = blob

    def remove_bucket(self, bucket: int) -> None:
        self.calls += 1
        self.buckets.pop(bucket, None)

    def append_held(self, held: HeldRecords) -> None:
        self.calls += 1
        self.written += 40 * len(held)
        self.held_rows.extend(held.tuples())

    def held(self) -> HeldRecords:
        self.calls += 1
        self.reads_held += 1
        return HeldRecords.of(self.held_rows)

    def replace_held(self, held: HeldRecords) -> None:
        self.calls += 1
        self.written += 40 * len(held)
        self.held_rows = held.tuples()

    def get_piece(self, name: str) -> bytes | None:
        self.calls += 1
        return self.pieces.get(name)

    def put_piece(self, name: str, blob: bytes) -> None:
        self.calls += 1
        self.written += len(blob)
        self.pieces[name] = blob

    def remove_piece(self, name: str) -> None:
        self.calls += 1
        self.pieces.pop(name, None)

    def bytes(self) -> int:
        """Everything stored (for the bounded-state tests)."""
        return (
            sum(len(b) for b in self.buckets.values())
            + sum(len(b) for b in self.pieces.values())
            + 40 * len(self.held_rows)
        )
