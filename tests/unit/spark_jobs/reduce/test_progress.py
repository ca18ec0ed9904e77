"""The reduce's progress record from Spark's own query progress (the JSON a StreamingQuery reports)."""

from __future__ import annotations

import json

from ballast.avro.codec import AvroCodec
from ballast.metrics.records import ReduceProgress, metric_of
from spark_jobs.query_progress import as_dict, end_offsets, ran_batch
from spark_jobs.reduce.progress import JOB_WATERMARK, JobWatermark, progress_metric

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
    "eventTime": {},  # the query declares no watermark: each worker keeps its own
    "observedMetrics": {"watermarks": {"workers": [{"worker": 0, "ms": 1_767_225_610_000}]}},
    "sources": [
        {
            "description": "KafkaV2[Subscribe[p.routed]]",
            "startOffset": {"p.routed": {"0": 0, "1": 0}},
            "endOffset": json.dumps({"p.routed": {"0": 120, "1": 80, "7": 3}}),
            "latestOffset": {"p.routed": {"0": 150, "1": 80, "7": 3}},  # capped: partition 0 is behind
        }
    ],
}


def test_a_batch_becomes_one_reduce_progress_record():
    progress = {**SPARK_PROGRESS, JOB_WATERMARK: JobWatermark().after(SPARK_PROGRESS)}
    record = progress_metric("job-1", progress, "p.routed", 8)
    codec = AvroCodec("io.ballast.MetricsRecord")
    metric = metric_of(codec.decode(codec.encode(record)))
    body = metric.body
    assert isinstance(body, ReduceProgress) and metric.source == "job-1/driver"
    assert (body.job, body.batch_id, body.input_rows) == ("job-1", 12, 3000)
    assert body.end_offsets == [120, 80, -1, -1, -1, -1, -1, 3]
    assert body.latest_offsets == [150, 80, -1, -1, -1, -1, -1, 3]
    kept = ("addBatch", "latestOffset", "queryPlanning", "triggerExecution", "walCommit", "commitOffsets")
    assert body.durations_ms == {k: SPARK_PROGRESS["durationMs"][k] for k in kept}  # getBatch dropped
    assert body.watermark_ms == 1_767_225_610_000
    assert metric.interval_end - metric.interval_start == 2000
    assert metric.interval_start == 1_763_962_664_123 + 31_536_000_000  # 2026-11-24T05:37:44.123Z


def test_idle_triggers_and_other_topics_are_left_out():
    idle = {**SPARK_PROGRESS, "durationMs": {"triggerExecution": 3, "latestOffset": 2}}
    assert ran_batch(SPARK_PROGRESS) and not ran_batch(idle)
    assert end_offsets(SPARK_PROGRESS, "other.routed", 2) == [-1, -1]
    no_latest = {**SPARK_PROGRESS, "sources": [{**SPARK_PROGRESS["sources"][0], "latestOffset": None}]}
    assert end_offsets(no_latest, "p.routed", 2, "latestOffset") == [-1, -1]  # a source that does not say
    assert as_dict(json.dumps(SPARK_PROGRESS)) == SPARK_PROGRESS


def _batch(batch_id: int, rows: int, ms: int) -> dict:
    return {
        **SPARK_PROGRESS,
        "batchId": batch_id,
        "numInputRows": rows,
        "durationMs": {"triggerExecution": ms},
    }


def test_the_status_line_covers_every_batch_since_the_last_one():
    from spark_jobs.reduce.runner import status_line

    line = status_line([_batch(7, 100, 900), _batch(5, 10, 100), _batch(6, 0, 5000)])
    assert "batches 5-7: 110 rows" in line
    assert "900 ms median, 5000 ms max" in line  # the slow batch in the middle shows
    assert "not seen" not in line
    assert status_line([_batch(3, 5, 40)]).startswith("reduce: batch 3: 5 rows, 40 ms,")


def test_the_status_line_says_how_many_batches_it_could_not_see():
    from spark_jobs.reduce.runner import status_line

    assert "2 not seen" in status_line([_batch(1, 1, 1), _batch(4, 1, 1)])


def test_the_jobs_watermark_is_its_slowest_workers_and_a_worker_that_did_not_run_keeps_its_own():
    def batch(*workers: tuple[int, int]) -> dict:
        observed = {"watermarks": {"workers": [{"worker": w, "ms": ms} for w, ms in workers]}}
        return {**SPARK_PROGRESS, "observedMetrics": observed}

    job = JobWatermark()
    assert job.after({**SPARK_PROGRESS, "observedMetrics": {}}) == 0  # nobody has run
    assert job.after(batch((0, 10_000), (1, 5_000))) == 5_000
    assert job.after(batch((1, 12_000))) == 10_000  # worker 0 did not run: still at 10 s
    assert job.after(batch((0, 20_000), (2, 7_000))) == 7_000  # a worker's first batch counts


def test_a_live_querys_observed_metrics_are_rows_and_read_the_same():
    """``query.lastProgress`` of a running query holds observed metrics as ``Row`` objects, not
    dicts (its JSON holds dicts): both read the same."""
    from pyspark.sql import Row

    live = {**SPARK_PROGRESS, "observedMetrics": {"watermarks": Row(workers=[Row(worker=3, ms=42)])}}
    assert JobWatermark().after(live) == 42
