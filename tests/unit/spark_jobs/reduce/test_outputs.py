"""A worker step's outputs as Kafka rows: every row decodes with the shipped schemas."""

from __future__ import annotations

from ballast.avro.codec import AvroCodec
from spark_jobs.processors.interface import WindowResult
from spark_jobs.reduce.engine import ChunkOut, DeadLetter, StepResult
from spark_jobs.reduce.outputs import OutputEncoder, result_key

TOPICS = {"output": "o", "routed": "r", "dead_letter": "d", "metrics": "m"}


def stats() -> dict:
    return {
        "worker": 3, "epoch": 2, "records": 10, "busy_ms": 12.5, "state_bytes": 100, "state_keys": 4,
        "frontier_epoch": 2, "watermark_ms": 1000, "step": 7, "spark_partition": 3, "late_records": 1,
        "held_records": 2, "pending_keys": 1, "duplicate_chunks": 0,
        "heavy_state": [{"key": "a", "bytes": 50}],
        "chunks_sent": [{"key": "a", "epoch": 2, "worker": 5, "bytes": 40}], "chunks_installed": [],
        "flow_latency_p50_ms": 3.0, "flow_latency_p99_ms": 9.0,
    }  # fmt: skip


def test_every_row_decodes_and_lands_where_it_should() -> None:
    result = WindowResult("k|1", 0, 1000, 2, 3.0, 1.0, 2.0, 1.5, (1.0, 2.0))
    step = StepResult(
        results=[result],
        chunks=[ChunkOut("a", 2, 3, 5, 0, 1, b"state")],
        dead=[DeadLetter(42, b"raw", "late", "event_time 1 < watermark 2")],
        stats=stats(),
    )
    frame = OutputEncoder(TOPICS, worker=3, job="agg").frame(step, now_ms=5_000)
    rows = {r.topic: r for r in frame.itertuples()}
    out = AvroCodec("io.ballast.OutputResult").decode(rows["o"].value)
    assert (out["key"], out["job"], out["count"], out["mean"], out["values"]) == (
        "k|1",
        "agg",
        2,
        1.5,
        [1.0, 2.0],
    )
    assert rows["o"].key == result_key("agg", result) == b"agg:0:1000:k|1"
    branch, chunk = AvroCodec("io.ballast.RoutedEnvelope").decode(rows["r"].value)["body"]
    assert branch == "io.ballast.StateChunk" and (chunk["key"], chunk["epoch"], chunk["job"]) == (
        "a",
        2,
        "agg",
    )
    assert rows["r"].partition == 5  # the new owner's routed partition
    assert (rows["d"].value, rows["d"].reason, rows["d"].source_offset) == (b"raw", "late", 42)
    metrics = AvroCodec("io.ballast.MetricsRecord").decode(rows["m"].value)
    assert metrics["source"] == "agg/worker-3" and metrics["body"][1]["chunks_sent"][0]["worker"] == 5
