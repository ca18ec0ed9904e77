"""Event-time windows: which windows a record belongs to, for a whole array of records at once.

A window is the half-open interval ``[start, start + size)`` with ``start`` a multiple of the slide;
a record at time ``t`` belongs to every window that contains it, ``size / slide`` of them (one for
tumbling windows). Window starts are aligned to the epoch (time 0), not to a key's first record,
so every key and every worker cuts time the same way and a key's state can move between workers
without its windows shifting.

Why floor division: times before the epoch are legal int64 milliseconds, and ``-1 ms`` belongs to
the window starting at ``-size``, not at 0. Truncating division would put it in ``[0, size)``.
"""

from __future__ import annotations

import operator
import struct
from dataclasses import dataclass

import numpy as np

_PACKED = struct.Struct("<qq")


@dataclass(frozen=True)
class WindowSpec:
    """Window size and slide in milliseconds; ``slide_ms`` None means tumbling (slide = size).

    ``slide_ms`` is normalised to ``size_ms`` when omitted, so two specs describing the same windows
    compare equal (a state written under one can be read under the other).
    """

    size_ms: int
    slide_ms: int | None = None

    def __post_init__(self) -> None:
        size = _positive_int("size_ms", self.size_ms)
        slide = size if self.slide_ms is None else _positive_int("slide_ms", self.slide_ms)
        if size % slide:
            raise ValueError(f"window size {size} ms must be a multiple of the slide {slide} ms")
        object.__setattr__(self, "size_ms", size)
        object.__setattr__(self, "slide_ms", slide)

    @property
    def step(self) -> int:
        """The slide as a plain int (never None after construction)."""
        return self.slide_ms if self.slide_ms is not None else self.size_ms

    @property
    def tumbling(self) -> bool:
        return self.step == self.size_ms

    @property
    def per_record(self) -> int:
        """How many windows each record belongs to."""
        return self.size_ms // self.step

    def end(self, start):
        """End (exclusive) of the window starting at ``start``; works on ints and int64 arrays."""
        return start + self.size_ms

    def assign(self, event_time: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(record_index, window_start) pairs: one per record and window it belongs to.

        Pairs come record by record (record_index never decreases) and, within a record, oldest
        window first. Why that order matters: a *stable* sort of the pairs by window start then
        keeps each window's records in input order, which order-dependent processors rely on.
        """
        latest = self.pane_start(event_time)
        per_record = self.per_record
        if per_record == 1:
            return np.arange(latest.size), latest
        back = np.arange(per_record - 1, -1, -1, dtype=np.int64) * self.step
        index = np.repeat(np.arange(latest.size), per_record)
        return index, (latest[:, None] - back[None, :]).ravel()

    def pane_start(self, event_time: np.ndarray) -> np.ndarray:
        """Start of each record's pane: the slide-long interval holding it, and its latest window.

        Records of one pane belong to exactly the same windows, which is what lets a sliding
        aggregate combine a batch per pane first and spread the few panes over their windows,
        instead of copying every record into ``size / slide`` windows.
        """
        t = np.asarray(event_time)
        if t.ndim != 1:
            raise ValueError("event_time must be one-dimensional")
        if t.dtype.kind not in "iu":
            if t.size:
                raise TypeError(f"event_time must hold integers (ms), got {t.dtype}")
            t = t.astype(np.int64)
        step = self.step
        return (t.astype(np.int64, copy=False) // step) * step  # floor: correct before the epoch

    def pack(self) -> bytes:
        """16 bytes naming these windows, written into state so a reader can refuse other windows."""
        return _PACKED.pack(self.size_ms, self.step)

    @classmethod
    def unpack(cls, data: bytes | memoryview, offset: int = 0) -> tuple[WindowSpec, int]:
        """The spec packed at ``offset`` and the offset just past it."""
        if len(data) < offset + _PACKED.size:
            raise ValueError("truncated window spec")
        size, slide = _PACKED.unpack_from(data, offset)
        return cls(size, slide), offset + _PACKED.size

    def __str__(self) -> str:
        if self.tumbling:
            return f"tumbling {self.size_ms} ms"
        return f"size {self.size_ms} ms, slide {self.step} ms"


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got {value!r}")
    try:
        number = operator.index(value)  # accepts numpy ints, refuses floats such as 10.5
    except TypeError:
        raise TypeError(f"{name} must be an int, got {value!r}") from None
    if number <= 0:
        raise ValueError(f"{name} must be > 0, got {number}")
    return number
