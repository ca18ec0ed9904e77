"""Ground truth for the stateful reduce: windowed results computed in one process with plain loops.

Why written independently: the end-to-end tests judge what the Spark job emits after keys have
moved between workers, state has been encoded, shipped, merged and replayed. If the expected
results came from ``spark_jobs.processors`` too, a mistake in a window formula or a fold would be
made twice and agree with itself. So this module shares no code with what it checks (it imports
nothing from ``spark_jobs``), uses no numpy, and states window membership straight from the
definition: a record at time ``t`` belongs to each window ``[start, start + size)`` with ``start`` a
multiple of the slide and ``start <= t < start + size``. It is slow and meant to be: readable first.

Input is events in each key's input order (the order the job's input delivers a key's records);
events of different keys may interleave freely. Sums are accumulated left to right in that order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

Expected = dict[tuple[str, int], dict[str, Any]]


def window_starts(event_time: int, size_ms: int, slide_ms: int | None = None) -> list[int]:
    """Starts of the windows holding ``event_time``, oldest first."""
    slide = size_ms if slide_ms is None else slide_ms
    if size_ms <= 0 or slide <= 0 or size_ms % slide:
        raise ValueError("size and slide must be positive and the size a multiple of the slide")
    # Python's % is the floor modulo, so this is the largest multiple of the slide <= event_time,
    # before the epoch as well; earlier windows follow one slide apart while they still hold it.
    latest = event_time - event_time % slide
    starts = []
    start = latest
    while start > event_time - size_ms:
        starts.append(start)
        start -= slide
    return starts[::-1]


def expected_aggregates(
    events: Iterable[Mapping[str, Any]], size_ms: int, slide_ms: int | None = None
) -> Expected:
    """``{(key, window_start): {count, sum, min, max, mean, window_end}}`` over ``events``."""
    out: Expected = {}
    for event in events:
        key, value, t = str(event["key"]), float(event["value"]), int(event["event_time"])
        for start in window_starts(t, size_ms, slide_ms):
            row = out.get((key, start))
            if row is None:
                out[(key, start)] = {
                    "count": 1,
                    "sum": value,
                    "min": value,
                    "max": value,
                    "window_end": start + size_ms,
                }
            else:
                row["count"] += 1
                row["sum"] += value
                if value < row["min"]:
                    row["min"] = value
                if value > row["max"]:
                    row["max"] = value
    for row in out.values():
        row["mean"] = row["sum"] / row["count"]
    return out


def expected_last_values(
    events: Iterable[Mapping[str, Any]], n: int, size_ms: int, slide_ms: int | None = None
) -> Expected:
    """As :func:`expected_aggregates`, plus ``values``: the window's last ``n`` values, oldest first."""
    events = list(events)
    out = expected_aggregates(events, size_ms, slide_ms)
    seen: dict[tuple[str, int], list[float]] = {}
    for event in events:
        key, value, t = str(event["key"]), float(event["value"]), int(event["event_time"])
        for start in window_starts(t, size_ms, slide_ms):
            seen.setdefault((key, start), []).append(value)
    for window, values in seen.items():
        out[window]["values"] = tuple(values[-n:])
    return out
