"""The partition stage's pure step: fold one batch of one routed partition into its window state.

Why apart from Spark and Kafka: this is where the results come from, so it is tested on its own
against a plain ``groupby`` (tests/unit/bench/test_partition_fold.py); the task around it
(:mod:`bench.reduce.partition_task`) only moves bytes.

Rules, chosen to write exactly the windows Spark's native windowed aggregation writes:

* a record's window is ``[t - t mod size, + size)`` (Spark's ``window()`` with no offset);
* a record is *late* when its window's end is at or below the batch's watermark: that window was
  already written and dropped, so counting the record would write it a second time. This is
  Spark's own rule for an aggregate keyed by a window (its eviction predicate compares the
  window's end), not "event time below the watermark": a record up to ``size`` older than the
  watermark may still belong to an open window, and Spark counts it;
* the windows whose end is at or below the watermark are closed after the batch's records are
  merged (Spark's ``StateStoreSaveExec`` in append mode), written once and dropped from the state;
* the partition's max event time counts every record, late ones too (``EventTimeWatermarkExec``);
* a batch id at or below the one the state holds is a replay: the state is not touched and the
  windows that batch closed are given again (the output is at least once, like Spark's Kafka
  sink); an older one than that cannot be answered and is an error.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

FIGURES = ("count", "sum", "min", "max")
INDEX = ["key", "window_start"]
_MERGE = {"count": "sum", "sum": "sum", "min": "min", "max": "max"}
NO_EVENT = -(2**62)


def empty_table() -> pd.DataFrame:
    """A window table with no rows: (key, window_start) -> count, sum, min, max."""
    index = pd.MultiIndex.from_arrays([np.array([], dtype=object), np.array([], dtype=np.int64)], names=INDEX)
    return pd.DataFrame(
        {
            "count": np.array([], dtype=np.int64),
            "sum": np.array([], dtype=np.float64),
            "min": np.array([], dtype=np.float64),
            "max": np.array([], dtype=np.float64),
        },
        index=index,
    )


@dataclass
class PartitionState:
    """One routed partition's open windows, and what its last batch did (for a replay)."""

    batch_id: int = -1  # the last batch folded in
    table: pd.DataFrame = field(default_factory=empty_table)
    max_event_ms: int = NO_EVENT
    late_total: int = 0
    last_closed: pd.DataFrame = field(default_factory=empty_table)  # windows batch_id closed
    last_late: int = 0


@dataclass(frozen=True)
class Step:
    """What one batch did to a partition: windows closed (to write), entries changed and removed
    (for the changelog), late records, the partition's max event time after it."""

    closed: pd.DataFrame
    changed: pd.DataFrame
    removed: pd.MultiIndex
    late: int
    max_event_ms: int
    replay: bool = False


def window_starts(times_ms: np.ndarray, window_ms: int) -> np.ndarray:
    return times_ms - np.mod(times_ms, window_ms)


def partial(keys: np.ndarray, values: np.ndarray, starts: np.ndarray) -> pd.DataFrame:
    """Map-side partial aggregate: count, sum, min, max per (key, window start)."""
    if len(keys) == 0:
        return empty_table()
    frame = pd.DataFrame({"key": keys, "window_start": starts, "v": values})
    g = frame.groupby(INDEX, sort=False)["v"]
    out = pd.DataFrame({"count": g.size(), "sum": g.sum(), "min": g.min(), "max": g.max()})
    out["count"] = out["count"].astype(np.int64)
    return out


def merge(table: pd.DataFrame, part: pd.DataFrame) -> pd.DataFrame:
    """The state with a partial aggregate folded in (both indexed by (key, window start))."""
    if len(part) == 0:
        return table
    if len(table) == 0:
        return part
    merged = pd.concat([table, part]).groupby(level=[0, 1], sort=False).agg(_MERGE)
    merged["count"] = merged["count"].astype(np.int64)
    return merged


def fold(
    state: PartitionState,
    batch_id: int,
    keys: np.ndarray,
    values: np.ndarray,
    times_ms: np.ndarray,
    watermark_ms: int,
    window_ms: int,
) -> tuple[PartitionState, Step]:
    """Fold batch ``batch_id``'s records of one partition into ``state`` (see the module docstring)."""
    if batch_id == state.batch_id:
        return state, Step(state.last_closed, empty_table(), empty_table().index, state.last_late,
                           state.max_event_ms, replay=True)  # fmt: skip
    if batch_id < state.batch_id:
        raise ValueError(f"batch {batch_id} is older than the state's batch {state.batch_id}")
    times_ms = np.asarray(times_ms, dtype=np.int64)
    starts = window_starts(times_ms, window_ms)
    on_time = starts + window_ms > watermark_ms
    late = int(len(times_ms) - on_time.sum())
    part = partial(np.asarray(keys, dtype=object)[on_time], np.asarray(values, dtype=np.float64)[on_time],
                   starts[on_time])  # fmt: skip
    merged = merge(state.table, part)
    ends = merged.index.get_level_values("window_start").to_numpy(dtype=np.int64) + window_ms
    closing = ends <= watermark_ms
    closed, kept = merged[closing], merged[~closing]
    max_ms = max(state.max_event_ms, int(times_ms.max())) if len(times_ms) else state.max_event_ms
    changed = kept.loc[part.index] if len(part) else empty_table()
    new = PartitionState(batch_id, kept, max_ms, state.late_total + late, closed, late)
    return new, Step(closed, changed, closed.index, late, max_ms)


def closed_rows(closed: pd.DataFrame, window_ms: int) -> pd.DataFrame:
    """Closed windows as output rows: key, window_start, window_end, count, sum, min, max, mean."""
    out = closed.reset_index()
    out["window_end"] = out["window_start"] + window_ms
    out["mean"] = out["sum"] / out["count"]
    return out[["key", "window_start", "window_end", "count", "sum", "min", "max", "mean"]]


def open_min_end(state: PartitionState, window_ms: int) -> int | None:
    """The end of the partition's oldest open window (None: none open): the driver closes an idle
    partition's windows once the watermark passes it."""
    if len(state.table) == 0:
        return None
    return int(state.table.index.get_level_values("window_start").min()) + window_ms
