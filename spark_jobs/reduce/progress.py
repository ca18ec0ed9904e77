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
from spark_jobs.query_progress import as_dict, end_offsets, iso_ms, ran_batch, unseen_batches

KEPT_DURATIONS = (
    "triggerExecution",
    "addBatch",
    "queryPlanning",
    "latestOffset",
    "walCommit",
    "commitOffsets",
)


def progress_metric(job: str, progress: dict[str, Any], routed_topic: str, partitions: int) -> dict[str, Any]:
    """The ``MetricsRecord`` (codec dict) of one batch's progress; the interval is the batch's run."""
    durations = {k: int(v) for k, v in progress.get("durationMs", {}).items() if k in KEPT_DURATIONS}
    start = iso_ms(progress.get("timestamp"))
    body = {
        "job": job,
        "batch_id": int(progress["batchId"]),
        "input_rows": int(progress.get("numInputRows", 0)),
        "durations_ms": durations,
        "end_offsets": end_offsets(progress, routed_topic, partitions),
        "watermark_ms": iso_ms(progress.get("eventTime", {}).get("watermark")),
        "processed_rows_per_s": float(progress.get("processedRowsPerSecond") or 0.0),
        "latest_offsets": end_offsets(progress, routed_topic, partitions, "latestOffset"),
    }
    return metrics_record(
        f"{job}/driver", start, start + durations.get("triggerExecution", 0), "ReduceProgress", body
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
        them (:func:`~spark_jobs.query_progress.unseen_batches` says why not its whole recent
        progress each time)."""
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
