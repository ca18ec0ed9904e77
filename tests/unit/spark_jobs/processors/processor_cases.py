"""Shared strategies and drivers for the processor tests: random windows, records and batchings.

Values are multiples of 1/4 of moderate size (dyadic rationals), so every partial sum is exact in
float64 and the exactness claims (merge equals whole, results equal the reference) can be tested
with ``==``; see spark_jobs/processors/window_stats.py for why general floats only agree up to
rounding.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from hypothesis import strategies as st

from spark_jobs.processors.interface import KeyRecords, Processor, WindowResult
from spark_jobs.processors.windows import WindowSpec

FAR_FUTURE = 2**62  # a watermark beyond every window the strategies make

dyadic = st.integers(-400, 400).map(lambda i: i / 4)
times = st.integers(-300, 300)  # both sides of the epoch, several windows wide


@st.composite
def window_specs(draw: st.DrawFn) -> WindowSpec:
    """Tumbling and sliding windows, 1 to 5 windows per record, small enough to overlap records."""
    slide = draw(st.integers(1, 40))
    per_record = draw(st.integers(1, 5))
    tumbling_as_none = per_record == 1 and draw(st.booleans())
    return WindowSpec(slide * per_record, None if tumbling_as_none else slide)


records_lists = st.lists(st.tuples(times, dyadic), max_size=60)


def as_records(pairs: Sequence[tuple[int, float]]) -> KeyRecords:
    return KeyRecords(
        np.array([t for t, _ in pairs], dtype=np.int64),
        np.array([v for _, v in pairs], dtype=np.float64),
    )


@st.composite
def cuts(draw: st.DrawFn, length: int, max_cuts: int = 6) -> list[int]:
    """Sorted cut points splitting ``length`` items into batches (empty batches allowed)."""
    return sorted(draw(st.lists(st.integers(0, length), max_size=max_cuts)))


def batches(pairs: Sequence[tuple[int, float]], cut_points: Sequence[int]) -> list[KeyRecords]:
    bounds = [0, *cut_points, len(pairs)]
    return [as_records(pairs[a:b]) for a, b in itertools.pairwise(bounds)]


def fold(processor: Processor, key: str, parts: Iterable[KeyRecords], state: Any = None) -> Any:
    """``process`` each batch in turn, starting from ``state`` (or a fresh one)."""
    state = processor.init() if state is None else state
    for part in parts:
        state = processor.process(key, part, state)
    return state


@st.composite
def keyed_events(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Events of a few keys interleaved, each key's in its input order."""
    keys = draw(st.lists(st.sampled_from("abcde"), max_size=80))
    return [{"key": k, "event_time": draw(times), "value": draw(dyadic)} for k in keys]


def run_per_key(
    processor: Processor, events: Sequence[dict[str, Any]], batch_size: int, watermark: int = FAR_FUTURE
) -> dict[tuple[str, int], WindowResult]:
    """What an engine would do: each key's records in batches of ``batch_size``, then one emit."""
    by_key: dict[str, list[tuple[int, float]]] = {}
    for e in events:
        by_key.setdefault(e["key"], []).append((e["event_time"], e["value"]))
    out: dict[tuple[str, int], WindowResult] = {}
    for key, pairs in by_key.items():
        cut_points = list(range(batch_size, len(pairs), batch_size))
        state = fold(processor, key, batches(pairs, cut_points))
        results, state = processor.emit(key, state, watermark)
        assert processor.is_empty(state)
        for r in results:
            assert (key, r.window_start) not in out
            out[(key, r.window_start)] = r
    return out


def as_reference_rows(results: dict[tuple[str, int], WindowResult], with_values: bool = False) -> dict:
    """Results in the shape tests/support/reduce_reference.py returns, for a direct ``==``."""
    rows = {}
    for window, r in results.items():
        row = {"count": r.count, "sum": r.sum, "min": r.min, "max": r.max, "mean": r.mean}
        row["window_end"] = r.window_end
        if with_values:
            row["values"] = r.values
        rows[window] = row
    return rows
