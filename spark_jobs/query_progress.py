"""Reading a Structured Streaming query's progress: as a dict, its instants, its source offsets,
and which batches a poll has not seen yet.

Why one module: the reduce's driver publishes its progress, and the benchmarks read the progress
of Spark's own aggregation the same way; each had written its own timestamp parse, its own
offset parse and its own polling. The parse of the offsets is the tolerant one (a restart once
reported an empty string and ended the reduce), and the polling is the cheap one (see
:func:`unseen_batches`), for every reader.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Any

WATERMARKS = "watermarks"  # the reduce's observed metric: each worker's watermark in the batch


def worker_watermarks(progress: dict[str, Any]) -> dict[int, int]:
    """Per worker that ran in the batch, its watermark (the reduce observes them; Spark's own
    ``eventTime.watermark`` says nothing, the query declares none)."""
    observed = _plain((progress.get("observedMetrics") or {}).get(WATERMARKS)) or {}
    out: dict[int, int] = {}
    for item in observed.get("workers") or ():
        item = _plain(item)
        if isinstance(item, dict) and item.get("worker") is not None and item.get("ms") is not None:
            out[int(item["worker"])] = int(item["ms"])
    return out


def _plain(value: Any) -> Any:
    """A ``pyspark.sql.Row`` (how a live query's progress holds observed metrics) as a dict; a dict
    (from the progress's JSON) as it is."""
    as_dict_ = getattr(value, "asDict", None)
    return as_dict_(recursive=True) if callable(as_dict_) else value


def iso_ms(iso: str | None) -> int:
    """Spark's ISO-8601 instant (``2026-11-25T01:02:03.456Z``) in epoch milliseconds; 0 for none."""
    if not iso:
        return 0
    return int(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000)


def as_dict(progress: Any) -> dict[str, Any]:
    """A ``StreamingQueryProgress`` (or its JSON, or a dict) as a plain dict."""
    if isinstance(progress, dict):
        return progress
    return json.loads(progress if isinstance(progress, str) else progress.json)


def ran_batch(progress: dict[str, Any]) -> bool:
    """The progress of a trigger that ran a batch (an idle trigger has no ``addBatch``)."""
    return "addBatch" in progress.get("durationMs", {})


def _offsets(raw: Any) -> dict[str, Any]:
    """A source's offsets as Spark reports them (a JSON string, or already a dict) as a dict; {} when
    it reports none. Why not ``json.loads`` alone: the first batch after a restart reported its
    ``latestOffset`` as an empty string, and the parse error ended the reduce (the offsets are an
    observation for the metrics topic; not knowing them must cost only the figure)."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw) if raw.strip() else None
        except ValueError:
            return {}
    return raw if isinstance(raw, dict) else {}


def end_offsets(progress: dict[str, Any], topic: str, partitions: int, which: str = "endOffset") -> list[int]:
    """Per partition of ``topic``, the offset the batch read up to (-1: the source does not say).

    ``which="latestOffset"``: the log end the source saw when the batch was planned instead.
    """
    ends = [-1] * partitions
    for source in progress.get("sources", ()):
        offsets = _offsets(source.get(which))
        for p, off in (offsets.get(topic) or {}).items():
            if 0 <= int(p) < partitions:
                ends[int(p)] = int(off)
    return ends


def unseen_batches(
    last_batch: int, latest: dict[str, Any] | None, recent: Callable[[], list[Any]]
) -> list[dict[str, Any]]:
    """The progress of every batch after ``last_batch``, from the query's ``latest`` progress alone
    when that is enough, else from ``recent()`` (the query's recent progress).

    Why not always ``recent()``: Spark keeps the last 100 progress updates and hands them all over
    on every call, each turned into JSON in the JVM and parsed back in Python. Polled twice a
    second, that was 0.67 of a core (0.43 in the JVM's Py4J threads, 0.24 in the driver) on a job
    reading 600 records/s, more than its Python workers spent on the records, and it slowed every
    batch sharing the cores. The latest progress is one update; ``recent()`` is needed only when a
    batch may have run unseen: after a start (``last_batch`` -1), when the latest batch is not the
    next one, and when the latest update is an idle trigger's newer than what was seen (whether
    an idle trigger reports the last batch's id or the next one's, a batch it follows may have run
    unseen; an idle query has the CPU to spare)."""
    if latest is None:
        return []
    latest = as_dict(latest)
    batch = int(latest["batchId"])
    if ran_batch(latest):
        if batch <= last_batch:
            return []
        if last_batch >= 0 and batch == last_batch + 1:
            return [latest]
    elif last_batch >= 0 and batch <= last_batch:
        return []
    return sorted(
        (p for p in map(as_dict, recent()) if ran_batch(p) and int(p["batchId"]) > last_batch),
        key=lambda p: int(p["batchId"]),
    )
