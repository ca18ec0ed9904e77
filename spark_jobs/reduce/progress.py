"""The reduce's micro-batch progress on the metrics topic (``ReduceProgress``), from its driver.

Why: Spark's Kafka source commits no consumer offsets, so from outside nothing tells how far a
reduce has read, how long its batches take or where its watermark is. The driver already has all
of it in the query's progress; publishing one record per micro-batch lets anyone who reads the
metrics topic (the demo, benchmarks, tests, later the shedder) follow the job without being in
its process. Idle triggers (no batch ran) are not published.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Any

from ballast.avro.codec import AvroCodec
from ballast.kafka.clients import make_producer
from ballast.kafka.configuration import KafkaConfig
from ballast.metrics.records import metrics_record

KEPT_DURATIONS = (
    "triggerExecution",
    "addBatch",
    "queryPlanning",
    "latestOffset",
    "walCommit",
    "commitOffsets",
)


def _ms(iso: str | None) -> int:
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


def progress_metric(job: str, progress: dict[str, Any], routed_topic: str, partitions: int) -> dict[str, Any]:
    """The ``MetricsRecord`` (codec dict) of one batch's progress; the interval is the batch's run."""
    durations = {k: int(v) for k, v in progress.get("durationMs", {}).items() if k in KEPT_DURATIONS}
    start = _ms(progress.get("timestamp"))
    body = {
        "job": job,
        "batch_id": int(progress["batchId"]),
        "input_rows": int(progress.get("numInputRows", 0)),
        "durations_ms": durations,
        "end_offsets": end_offsets(progress, routed_topic, partitions),
        "watermark_ms": _ms(progress.get("eventTime", {}).get("watermark")),
        "processed_rows_per_s": float(progress.get("processedRowsPerSecond") or 0.0),
        "latest_offsets": end_offsets(progress, routed_topic, partitions, "latestOffset"),
    }
    return metrics_record(
        f"{job}/driver", start, start + durations.get("triggerExecution", 0), "ReduceProgress", body
    )


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


class ProgressPublisher:
    """Publishes each batch's progress once (by batch id) to the metrics topic."""

    def __init__(self, kafka: KafkaConfig, topic: str, job: str, routed_topic: str, partitions: int) -> None:
        self.topic = topic
        self.job = job
        self.routed_topic = routed_topic
        self.partitions = partitions
        self.codec = AvroCodec("io.ballast.MetricsRecord")
        self.producer = make_producer(kafka.with_client_id(f"{job}-progress"))
        self.last_batch = -1

    def publish_new(self, query: Any) -> list[dict[str, Any]]:
        """The batches of ``query`` (a ``StreamingQuery``) not published yet, published; returns
        them (see :func:`unseen_batches` for why not its whole recent progress each time)."""
        return self.publish(unseen_batches(self.last_batch, query.lastProgress, lambda: query.recentProgress))

    def publish(self, recent: list[Any]) -> list[dict[str, Any]]:
        """The batches of ``recent`` (the query's recent progress) not published yet; returns them."""
        new = [p for p in map(as_dict, recent) if ran_batch(p) and int(p["batchId"]) > self.last_batch]
        for p in sorted(new, key=lambda p: int(p["batchId"])):
            record = progress_metric(self.job, p, self.routed_topic, self.partitions)
            self.producer.produce(self.topic, self.codec.encode(record), self.job.encode())
            self.last_batch = int(p["batchId"])
        self.producer.poll(0)
        return new

    def close(self, timeout: float = 10.0) -> None:
        self.producer.flush(timeout)
