"""A worker step's outputs as Kafka rows: results, state chunks, dead letters and its stats record.

Why one frame of (topic, partition, key, value) rows: the job writes everything a micro-batch
produces with *one* Kafka sink (the sink takes the topic and partition per row), so the stateful
operator runs once per batch; writing results and chunks through two sinks would run it twice or
need a cache. Chunks name their partition (the new owner's); the others leave it to Kafka's
partitioner (murmur2 of the key). Results are keyed by window and key, so a rewrite after a
restart replaces the same Kafka key (see docs/reduce.md, "Delivery").
"""

from __future__ import annotations

import time
from typing import Any

import pandas as pd

from ballast.avro.codec import AvroCodec
from spark_jobs.processors.interface import WindowResult
from spark_jobs.reduce.engine import ChunkOut, StepResult

OUTPUT_SCHEMA = (
    "topic STRING, partition INT, key BINARY, value BINARY, "
    "reason STRING, detail STRING, source_partition INT, source_offset LONG"
)


def result_key(job: str, result: WindowResult) -> bytes:
    """The output record's Kafka key: job and window first, the key last (it may hold any text)."""
    return f"{job}:{result.window_start}:{result.window_end}:{result.key}".encode()


class OutputEncoder:
    """Encodes one worker's step outputs (Avro with Ballast's single-object header)."""

    def __init__(self, topics: dict[str, str], worker: int, job: str = "") -> None:
        self.topics = topics
        self.worker = worker
        self.job = job
        self._result = AvroCodec("io.ballast.OutputResult")
        self._envelope = AvroCodec("io.ballast.RoutedEnvelope")
        self._metrics = AvroCodec("io.ballast.MetricsRecord")

    def result_value(self, r: WindowResult, epoch: int) -> bytes:
        return self._result.encode(
            {
                "key": r.key,
                "job": self.job,
                "window_start": int(r.window_start),
                "window_end": int(r.window_end),
                "count": int(r.count),
                "sum": float(r.sum),
                "min": None if r.min is None else float(r.min),
                "max": None if r.max is None else float(r.max),
                "mean": None if r.mean is None else float(r.mean),
                "values": [float(v) for v in r.values],
                "worker": self.worker,
                "epoch": int(epoch),
                "keep_probability": 1.0,
                "estimated_count": float(r.count),
                "relative_error": 0.0,
            }
        )

    def chunk_value(self, c: ChunkOut) -> bytes:
        return self._envelope.encode(
            {
                "body": (
                    "io.ballast.StateChunk",
                    {
                        "epoch": c.epoch,
                        "key": c.key,
                        "from_worker": c.from_worker,
                        "to_worker": c.to_worker,
                        "chunk_index": c.chunk_index,
                        "chunk_count": c.chunk_count,
                        "state": c.state,
                        "job": self.job,
                    },
                )
            }
        )

    def stats_value(self, stats: dict[str, Any], now_ms: int) -> bytes:
        start = now_ms - int(stats["busy_ms"])
        return self._metrics.encode(
            {
                "source": f"{self.job}/worker-{self.worker}",
                "interval_start": start,
                "interval_end": now_ms,
                "body": ("io.ballast.WorkerStats", stats),
            }
        )

    def frame(self, result: StepResult, now_ms: int | None = None) -> pd.DataFrame:
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        epoch = int(result.stats.get("epoch", 0))
        rows: list[tuple[Any, ...]] = []
        out = self.topics["output"]
        for r in result.results:
            rows.append(
                (out, None, result_key(self.job, r), self.result_value(r, epoch), None, None, None, None)
            )
        routed = self.topics["routed"]
        for c in result.chunks:
            rows.append((routed, c.to_worker, c.key.encode(), self.chunk_value(c), None, None, None, None))
        dlq = self.topics["dead_letter"]
        for d in result.dead:
            rows.append((dlq, None, None, d.raw, d.reason, d.detail, self.worker, d.offset))
        rows.append(
            (
                self.topics["metrics"],
                None,
                f"{self.job}/worker-{self.worker}".encode(),
                self.stats_value(result.stats, now_ms),
                None,
                None,
                None,
                None,
            )
        )
        frame = pd.DataFrame(
            rows,
            columns=[
                "topic",
                "partition",
                "key",
                "value",
                "reason",
                "detail",
                "source_partition",
                "source_offset",
            ],
        )
        for col in ("partition", "source_partition"):
            frame[col] = frame[col].astype("Int32")
        frame["source_offset"] = frame["source_offset"].astype("Int64")
        return frame
