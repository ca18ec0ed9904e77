"""Where a worker keeps its state between micro-batches: Spark's state store in the job, a dict in tests.

Why this shape (one map of buckets, one list of held records, one map of chunk pieces): Spark's
state API costs one call into the JVM per get or put (0.1-1 ms each here, measured), so state is
grouped into a few large entries, read only when a batch needs them:

* ``buckets``: bucket id -> the encoded rows (:class:`~spark_jobs.processors.table.Table`) of one
  window start (or one hash bin, for per-key processors). A window's rows are dropped together
  once the watermark passes its end plus the correction horizon: state follows open windows.
* ``held``: records of keys whose state has not arrived yet, for processors that cannot merge. A
  list state: a batch *appends* its held records (one call), instead of rewriting what a hot key
  already holds (which made holding quadratic); they are read once, when the state arrives.
* ``pieces``: parts of a state chunk that came in several records, until the last part arrives.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

HELD_SCHEMA = "key STRING, run LONG, seq LONG, event_time LONG, value DOUBLE"


class HeldRecords:
    """Records held for runs waiting for their state: parallel columns, ``seq`` keeps input order."""

    __slots__ = ("event_time", "key", "run", "seq", "value")

    def __init__(
        self, key: np.ndarray, run: np.ndarray, seq: np.ndarray, event_time: np.ndarray, value: np.ndarray
    ) -> None:
        self.key = key
        self.run = run
        self.seq = seq
        self.event_time = event_time
        self.value = value

    @classmethod
    def empty(cls) -> HeldRecords:
        i = np.empty(0, dtype=np.int64)
        return cls(np.empty(0, dtype=object), i, i, i, np.empty(0, dtype=np.float64))

    def __len__(self) -> int:
        return int(self.key.size)

    def take(self, index: np.ndarray) -> HeldRecords:
        return HeldRecords(
            self.key[index], self.run[index], self.seq[index], self.event_time[index], self.value[index]
        )

    def tuples(self) -> list[tuple[str, int, int, int, float]]:
        return list(
            zip(
                self.key.tolist(),
                self.run.tolist(),
                self.seq.tolist(),
                self.event_time.tolist(),
                self.value.tolist(),
                strict=True,
            )
        )

    @classmethod
    def of(cls, rows: list[tuple[str, int, int, int, float]]) -> HeldRecords:
        if not rows:
            return cls.empty()
        key = np.empty(len(rows), dtype=object)
        key[:] = [r[0] for r in rows]
        cols = list(zip(*rows, strict=True))
        return cls(
            key,
            np.array(cols[1], dtype=np.int64),
            np.array(cols[2], dtype=np.int64),
            np.array(cols[3], dtype=np.int64),
            np.array(cols[4], dtype=np.float64),
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
        self.held_rows: list[tuple[str, int, int, int, float]] = []
        self.pieces: dict[str, bytes] = {}
        self.calls = 0  # trips a real store would make into the JVM
        self.written = 0  # bytes handed to the store (what a real one would encode and commit)

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
