"""A processor of your own for ``ballast reduce run``: the largest values of each key and window.

Run it with ``--processor top_values:TopValues:n=3,size=10s`` (the module on ``PYTHONPATH``; with
``ballast reduce submit`` also ``--py-files top_values.py``). docs/processors.md explains the contract
this file follows; tests/e2e run this very file from a folder outside the project.

Why it is mergeable: the largest n values of two record sets together are the largest n of each
set's largest n, so while a key moves between workers the new worker keeps a partial state and the
engine merges the old worker's into it when it arrives; no record has to wait. Why its state is a
dict of numpy arrays per window start: small, and it encodes with plain ``struct`` and ``tobytes``
(the state travels between workers as bytes and lives in Spark's state store as bytes).
"""

from __future__ import annotations

import struct

import numpy as np

from spark_jobs.durations import parse_duration
from spark_jobs.processors.interface import KeyRecords, Processor, WindowResult
from spark_jobs.processors.windows import WindowSpec

_HEAD = struct.Struct("<BIq")  # version, n, window size (ms): a state written for other options is refused
_WINDOW = struct.Struct("<qqdI")  # start, count, sum, how many values follow


class Window:
    """One window of one key: its count and sum over every record, and its largest n values."""

    __slots__ = ("count", "sum", "top")

    def __init__(self, count: int = 0, total: float = 0.0, top: np.ndarray | None = None) -> None:
        self.count = count
        self.sum = total
        self.top = np.empty(0) if top is None else top


State = dict[int, Window]  # window start -> window


class TopValues(Processor[State]):
    """Per key and tumbling window: count, sum, and the ``n`` largest values (largest first)."""

    name = "top_values"
    mergeable = True

    def __init__(self, n: str | int = 3, size: str = "10s") -> None:
        # options arrive as text from the command line (n=3,size=10s)
        self.n = int(n)
        if self.n <= 0:
            raise ValueError(f"n must be positive, got {n}")
        self.windows = WindowSpec(parse_duration(size) if isinstance(size, str) else int(size))

    def init(self) -> State:
        return {}

    def process(self, key: str, records: KeyRecords, state: State) -> State:
        out = dict(state)
        starts = self.windows.pane_start(records.event_time)
        for start in np.unique(starts).tolist():
            values = records.value[starts == start]
            held = out.get(start, Window())
            top = np.sort(np.concatenate([held.top, values]))[::-1][: self.n]
            out[start] = Window(held.count + values.size, held.sum + float(values.sum()), top)
        return out

    def merge(self, earlier: State, later: State) -> State:
        out = dict(earlier)
        for start, w in later.items():
            held = out.get(start, Window())
            top = np.sort(np.concatenate([held.top, w.top]))[::-1][: self.n]
            out[start] = Window(held.count + w.count, held.sum + w.sum, top)
        return out

    def emit(self, key: str, state: State, watermark_ms: int) -> tuple[list[WindowResult], State]:
        size = self.windows.size_ms
        due = sorted(s for s in state if s + size <= watermark_ms)
        results = []
        for start in due:
            w = state[start]
            results.append(
                WindowResult(
                    key, start, start + size, w.count, w.sum,
                    float(w.top.min()), float(w.top.max()), w.sum / w.count, tuple(w.top.tolist()),
                )
            )  # fmt: skip
        return results, {s: w for s, w in state.items() if s + size > watermark_ms}

    def next_due(self, state: State) -> int | None:
        return min(state) + self.windows.size_ms if state else None

    def is_empty(self, state: State) -> bool:
        return not state

    def encode(self, state: State) -> bytes:
        parts = [_HEAD.pack(1, self.n, self.windows.size_ms)]
        for start in sorted(state):
            w = state[start]
            parts.append(_WINDOW.pack(start, w.count, w.sum, w.top.size))
            parts.append(w.top.astype("<f8").tobytes())
        return b"".join(parts)

    def decode(self, data: bytes | memoryview) -> State:
        data = bytes(data)
        version, n, size = _HEAD.unpack_from(data, 0)
        if (version, n, size) != (1, self.n, self.windows.size_ms):
            raise ValueError(f"a top_values state of n={n}, size={size} ms (version {version}), not ours")
        state: State = {}
        offset = _HEAD.size
        while offset < len(data):
            start, count, total, kept = _WINDOW.unpack_from(data, offset)
            offset += _WINDOW.size
            top = np.frombuffer(data, dtype="<f8", count=kept, offset=offset).astype(np.float64)
            offset += 8 * kept
            state[start] = Window(count, total, top)
        return state
