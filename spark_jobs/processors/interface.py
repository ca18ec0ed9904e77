"""The contract between a user's processor and the worker engine that holds its per-key state.

The engine owns everything stateful about *where* a key lives: it groups a micro-batch by key,
calls :meth:`Processor.process` once per key, asks :meth:`Processor.emit` for windows the watermark
has closed, and moves a key's state between workers as bytes (:meth:`Processor.encode`). The
processor owns *what* the state means. Keeping the two apart is what lets keys migrate live: the
engine never needs to understand a processor's state, only to carry it.

A key's move has a window where two workers hold part of its history: the old worker's state
(records before the move) is in flight while the new worker already receives records after it.
For a *mergeable* processor the new worker folds those into a fresh state and later calls
``merge(earlier, later)``; for the others the engine must buffer the records (they travel as
:meth:`KeyRecords.encode` bytes) and replay them onto the old state once it arrives.

A command line names a processor and its options in one string (``aggregate:tumbling=10s``); the
registry that reads it is :mod:`spark_jobs.processors.spec`, since it has to import the processors
and they import this module.
"""

from __future__ import annotations

import abc
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from typing import ClassVar, Generic, TypeVar

import numpy as np

S = TypeVar("S")

_RECORDS_VERSION = 1
_RECORDS_HEADER = struct.Struct("<BQ")  # version, record count; then int64 times, float64 values (LE)


class NotMergeableError(TypeError):
    """``merge`` called on a processor whose result depends on the order of all a key's records."""


@dataclass(frozen=True, eq=False)
class KeyRecords:
    """One key's records of one micro-batch, in input order (parallel arrays, one entry a record).

    ``event_time`` is int64 milliseconds, ``value`` float64. Inputs are converted once here, so
    processors can rely on the dtypes without checking them again per call.
    """

    event_time: np.ndarray
    value: np.ndarray

    def __post_init__(self) -> None:
        times = np.asarray(self.event_time)
        if times.dtype.kind not in "iu" and times.size:
            raise TypeError(f"event_time must hold integer milliseconds, got {times.dtype}")
        times = times.astype(np.int64, copy=False)
        values = np.asarray(self.value, dtype=np.float64)
        if times.ndim != 1 or values.ndim != 1:
            raise ValueError("event_time and value must be one-dimensional")
        if times.shape != values.shape:
            raise ValueError(f"{times.size} event times but {values.size} values")
        object.__setattr__(self, "event_time", times)
        object.__setattr__(self, "value", values)

    @classmethod
    def empty(cls) -> KeyRecords:
        return cls(np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64))

    @classmethod
    def concat(cls, parts: Iterable[KeyRecords]) -> KeyRecords:
        """The records of ``parts`` one after the other (input order kept)."""
        parts = list(parts)
        if not parts:
            return cls.empty()
        if len(parts) == 1:
            return parts[0]
        return cls(
            np.concatenate([p.event_time for p in parts]),
            np.concatenate([p.value for p in parts]),
        )

    def __len__(self) -> int:
        return int(self.event_time.size)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, KeyRecords):
            return NotImplemented
        return np.array_equal(self.event_time, other.event_time) and np.array_equal(
            self.value, other.value, equal_nan=True
        )

    __hash__ = None  # type: ignore[assignment]  # mutable arrays inside: not hashable

    def encode(self) -> bytes:
        """Header (version, count) then the raw little-endian arrays: 16 bytes a record, no parsing.

        Why raw arrays: a non-mergeable key's buffered records travel with its state on every move,
        so their encoding is on the migration path and must cost a memcpy, not a loop.
        """
        return b"".join(
            (
                _RECORDS_HEADER.pack(_RECORDS_VERSION, len(self)),
                self.event_time.astype("<i8", copy=False).tobytes(),
                self.value.astype("<f8", copy=False).tobytes(),
            )
        )

    @classmethod
    def decode(cls, data: bytes | memoryview) -> KeyRecords:
        if len(data) < _RECORDS_HEADER.size:
            raise ValueError(f"KeyRecords: {len(data)} bytes is shorter than the header")
        version, count = _RECORDS_HEADER.unpack_from(data, 0)
        if version != _RECORDS_VERSION:
            raise ValueError(f"KeyRecords: unknown encoding version {version}")
        expected = _RECORDS_HEADER.size + 16 * count
        if len(data) != expected:
            raise ValueError(f"KeyRecords: {count} records need {expected} bytes, got {len(data)}")
        offset = _RECORDS_HEADER.size
        times = np.frombuffer(data, dtype="<i8", count=count, offset=offset)
        values = np.frombuffer(data, dtype="<f8", count=count, offset=offset + 8 * count)
        return cls(times.astype(np.int64, copy=False), values.astype(np.float64, copy=False))


@dataclass(frozen=True)
class WindowResult:
    """One closed window of one key: the row the job writes out.

    ``min``/``max``/``mean`` are None only for a window without records (processors shipped here
    never emit one, but a processor that emits empty windows on a timer may). ``values`` carries
    per-record detail for processors that keep it (oldest first), and is empty otherwise.
    """

    key: str
    window_start: int
    window_end: int
    count: int
    sum: float
    min: float | None
    max: float | None
    mean: float | None
    values: tuple[float, ...] = ()


class Processor(abc.ABC, Generic[S]):
    """A user's per-key stateful computation over event-time windows.

    States are values: every method returns a new state instead of changing its argument, so the
    engine may keep an old state (e.g. the copy it is shipping) while a new one is built.
    """

    name: ClassVar[str]
    mergeable: ClassVar[bool]

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if getattr(cls, "mergeable", False) and cls.merge is Processor.merge:
            raise TypeError(f"{cls.__name__} says it is mergeable but does not define merge")

    @abc.abstractmethod
    def init(self) -> S:
        """The state of a key with no records yet."""

    @abc.abstractmethod
    def process(self, key: str, records: KeyRecords, state: S) -> S:
        """Fold one micro-batch of the key's records, in order, into ``state``.

        Records of windows that were already emitted would open those windows again; dropping
        late records (by the watermark) is the engine's job, since only it knows the watermark
        a record was read under.
        """

    def merge(self, earlier: S, later: S) -> S:
        """Join two partial states of one key: as if the records behind ``later`` followed ``earlier``'s.

        ``earlier`` is what the key's old worker built from the records before the move, ``later``
        what the new worker built from the records after it. The result must equal processing
        all the records in order. Only mergeable processors implement it.
        """
        raise NotMergeableError(
            f"processor {self.name!r} is not mergeable: its result depends on the order of all of a "
            "key's records, so during a move the engine must buffer the new worker's records "
            "(KeyRecords.encode) and replay them onto the old state with process()"
        )

    @abc.abstractmethod
    def emit(self, key: str, state: S, watermark_ms: int) -> tuple[list[WindowResult], S]:
        """Results of every window with ``window_end <= watermark_ms``, and the state without them.

        A window is closed once the watermark reaches its end: no record at or after the watermark
        can belong to it. Results come in window-start order.
        """

    @abc.abstractmethod
    def next_due(self, state: S) -> int | None:
        """The smallest window end still held (the watermark at which to call emit), or None."""

    @abc.abstractmethod
    def is_empty(self, state: S) -> bool:
        """True when the state holds nothing, so the engine may drop it instead of storing it."""

    @abc.abstractmethod
    def encode(self, state: S) -> bytes:
        """The state as bytes, for the state store and for moving the key to another worker."""

    @abc.abstractmethod
    def decode(self, data: bytes | memoryview) -> S:
        """The state :meth:`encode` wrote; a state written for other options is refused."""
