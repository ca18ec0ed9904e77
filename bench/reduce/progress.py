"""One micro-batch as the benchmark sees it, whichever process ran the query.

Why one shape for two sources: (a)'s query runs in the benchmark's own SparkSession and reports
through ``query.recentProgress``; the reduce job of (b) and (c) runs in a process of its own and
publishes one ``ReduceProgress`` per batch to the metrics topic. Waiting, classification and
figures compare the placements, so they read both as :class:`BatchProgress`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ballast.metrics.records import Metric, ReduceProgress
from spark_jobs.query_progress import as_dict, end_offsets, iso_ms, ran_batch


@dataclass(frozen=True)
class BatchProgress:
    id: int
    start_ms: int
    input_rows: int
    durations: dict[str, int]  # Spark's durationMs (triggerExecution, addBatch, ...)
    end_offsets: list[int]  # per routed partition, exclusive; -1: not known

    @property
    def duration_ms(self) -> int:
        return self.durations.get("triggerExecution", 0)

    def covers(self, ends: Mapping[int, int]) -> bool:
        """The batch read every routed partition at least up to ``ends``."""
        return all(
            end <= 0 or (p < len(self.end_offsets) and self.end_offsets[p] >= end) for p, end in ends.items()
        )


def of_spark(progress: Any, topic: str, partitions: int) -> BatchProgress | None:
    """A ``StreamingQueryProgress`` of the benchmark's own query; None for a trigger that ran no
    batch (no ``addBatch``: an idle trigger only asked for offsets)."""
    d = as_dict(progress)
    if not ran_batch(d):
        return None
    durations = {k: int(v) for k, v in d["durationMs"].items()}
    return BatchProgress(
        int(d["batchId"]),
        iso_ms(d["timestamp"]),
        int(d.get("numInputRows", 0)),
        durations,
        end_offsets(d, topic, partitions),
    )


def of_metric(metric: Metric, body: ReduceProgress) -> BatchProgress:
    """A reduce job's ``ReduceProgress`` (its interval starts when the batch did)."""
    return BatchProgress(
        body.batch_id, metric.interval_start, body.input_rows, dict(body.durations_ms), list(body.end_offsets)
    )


def offsets_read(batches: list[dict]) -> list[tuple[dict, list[tuple[int, int, int]]]]:
    """Each batch row (:func:`bench.reduce.runs.batch_row`), in id order, with the offsets it read:
    ``(partition, from, to)``, ``to`` exclusive, from the end offsets of the batch before (0 for
    the first); an end offset not known (-1) reads nothing and moves nothing."""
    out = []
    before: dict[int, int] = {}
    for b in sorted(batches, key=lambda b: b["id"]):
        ranges = []
        for p, end in enumerate(b["end_offsets"]):
            lo = before.get(p, 0)
            before[p] = hi = max(lo, end)
            ranges.append((p, lo, hi))
        out.append((b, ranges))
    return out
