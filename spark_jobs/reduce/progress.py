"""The reduce's micro-batch progress on the metrics topic (``ReduceProgress``), from its driver.

Why: Spark's Kafka source commits no consumer offsets, so from outside nothing tells how far a
reduce has read, how long its batches take or where its watermark is. The driver already has all
of it in the query's progress; publishing one record per micro-batch lets anyone who reads the
metrics topic (the demo, benchmarks, tests, later the shedder) follow the job without being in
its process. Idle triggers (no batch ran) are not published.
"""

from __future__ import annotations

from typing import Any

from ballast.avro.codec import AvroCodec
from ballast.kafka.clients import make_producer
from ballast.kafka.configuration import KafkaConfig
from ballast.metrics.records import metrics_record
from spark_jobs.query_progress import (
    as_dict,
    end_offsets,
    iso_ms,
    ran_batch,
    unseen_batches,
    worker_watermarks,
)

KEPT_DURATIONS = (
    "triggerExecution",
    "addBatch",
    "queryPlanning",
    "latestOffset",
    "walCommit",
    "commitOffsets",
)


JOB_WATERMARK = "ballastWatermarkMs"  # added to each published progress dict: the job's watermark after it


def progress_metric(job: str, progress: dict[str, Any], routed_topic: str, partitions: int) -> dict[str, Any]:
    """The ``MetricsRecord`` (codec dict) of one batch's progress; the interval is the batch's run.
    Its watermark is the job's (:data:`JOB_WATERMARK`, set by :class:`ProgressPublisher`)."""
    durations = {k: int(v) for k, v in progress.get("durationMs", {}).items() if k in KEPT_DURATIONS}
    start = iso_ms(progress.get("timestamp"))
    body = {
        "job": job,
        "batch_id": int(progress["batchId"]),
        "input_rows": int(progress.get("numInputRows", 0)),
        "durations_ms": durations,
        "end_offsets": end_offsets(progress, routed_topic, partitions),
        "watermark_ms": int(progress.get(JOB_WATERMARK, 0)),
        "processed_rows_per_s": float(progress.get("processedRowsPerSecond") or 0.0),
        "latest_offsets": end_offsets(progress, routed_topic, partitions, "latestOffset"),
    }
    return metrics_record(
        f"{job}/driver", start, start + durations.get("triggerExecution", 0), "ReduceProgress", body
    )


class JobWatermark:
    """The job's watermark: the lowest of its workers'. Each worker keeps its own (from the input
    partitions' progress) and reports it in the batches it runs in; one that did not run keeps
    its last. Every window that ends at or before the job's watermark has been written by every
    worker that holds one; a worker that has not run yet holds none and is not counted."""

    def __init__(self) -> None:
        self.workers: dict[int, int] = {}

    def after(self, progress: dict[str, Any]) -> int:
        self.workers.update(worker_watermarks(progress))
        return min(self.workers.values()) if self.workers else 0


class ProgressPublisher:
    """Publishes each batch's progress once (by batch id) to the metrics topic, with the job's
    watermark (:class:`JobWatermark`)."""

    def __init__(self, kafka: KafkaConfig, topic: str, job: str, routed_topic: str, partitions: int) -> None:
        self.topic = topic
        self.job = job
        self.routed_topic = routed_topic
        self.partitions = partitions
        self.codec = AvroCodec("io.ballast.MetricsRecord")
        self.producer = make_producer(kafka.with_client_id(f"{job}-progress"))
        self.last_batch = -1
        self.watermark = JobWatermark()

    def publish_new(self, query: Any) -> list[dict[str, Any]]:
        """The batches of ``query`` (a ``StreamingQuery``) not published yet, published; returns
        them (:func:`~spark_jobs.query_progress.unseen_batches` says why not its whole recent
        progress each time)."""
        return self.publish(unseen_batches(self.last_batch, query.lastProgress, lambda: query.recentProgress))

    def publish(self, recent: list[Any]) -> list[dict[str, Any]]:
        """The batches of ``recent`` (the query's recent progress) not published yet; returns them."""
        new = [p for p in map(as_dict, recent) if ran_batch(p) and int(p["batchId"]) > self.last_batch]
        for p in sorted(new, key=lambda p: int(p["batchId"])):
            p[JOB_WATERMARK] = self.watermark.after(p)
            record = progress_metric(self.job, p, self.routed_topic, self.partitions)
            self.producer.produce(self.topic, self.codec.encode(record), self.job.encode())
            self.last_batch = int(p["batchId"])
        self.producer.poll(0)
        return new

    def close(self, timeout: float = 10.0) -> None:
        self.producer.flush(timeout)
