"""The reduce's progress record from Spark's own query progress (the JSON a StreamingQuery reports)."""

from __future__ import annotations

import json

from ballast.avro.codec import AvroCodec
from ballast.metrics.records import ReduceProgress, metric_of
from spark_jobs.reduce.progress import as_dict, end_offsets, progress_metric, ran_batch

# the shape of StreamingQueryProgress.json in Spark 4.0 (fields the job reads, as Spark names them)
SPARK_PROGRESS = {
    "id": "q",
    "runId": "r",
    "name": "job-1",
    "timestamp": "2026-11-24T05:37:44.123Z",
    "batchId": 12,
    "numInputRows": 3000,
    "processedRowsPerSecond": 1500.0,
    "durationMs": {
        "addBatch": 1800,
        "latestOffset": 5,
        "queryPlanning": 40,
        "triggerExecution": 2000,
        "walCommit": 30,
        "commitOffsets": 25,
        "getBatch": 0,
    },
    "eventTime": {"watermark": "2026-01-01T00:00:10.000Z"},
    "sources": [
        {
            "description": "KafkaV2[Subscribe[p.routed]]",
            "startOffset": {"p.routed": {"0": 0, "1": 0}},
            "endOffset": json.dumps({"p.routed": {"0": 120, "1": 80, "7": 3}}),
        }
    ],
}


def test_a_batch_becomes_one_reduce_progress_record():
    record = progress_metric("job-1", SPARK_PROGRESS, "p.routed", 8)
    codec = AvroCodec("io.ballast.MetricsRecord")
    metric = metric_of(codec.decode(codec.encode(record)))
    body = metric.body
    assert isinstance(body, ReduceProgress) and metric.source == "job-1/driver"
    assert (body.job, body.batch_id, body.input_rows) == ("job-1", 12, 3000)
    assert body.end_offsets == [120, 80, -1, -1, -1, -1, -1, 3]
    kept = ("addBatch", "latestOffset", "queryPlanning", "triggerExecution", "walCommit", "commitOffsets")
    assert body.durations_ms == {k: SPARK_PROGRESS["durationMs"][k] for k in kept}  # getBatch dropped
    assert body.watermark_ms == 1_767_225_610_000
    assert metric.interval_end - metric.interval_start == 2000
    assert metric.interval_start == 1_763_962_664_123 + 31_536_000_000  # 2026-11-24T05:37:44.123Z


def test_idle_triggers_and_other_topics_are_left_out():
    idle = {**SPARK_PROGRESS, "durationMs": {"triggerExecution": 3, "latestOffset": 2}}
    assert ran_batch(SPARK_PROGRESS) and not ran_batch(idle)
    assert end_offsets(SPARK_PROGRESS, "other.routed", 2) == [-1, -1]
    assert as_dict(json.dumps(SPARK_PROGRESS)) == SPARK_PROGRESS
