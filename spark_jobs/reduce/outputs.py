"""A worker step's outputs as rows of one Kafka sink: results, state chunks, dead letters, stats.

Why one frame for everything: the job writes all a micro-batch produces with *one* Kafka sink (the
sink takes the topic and partition per row), so the stateful operator runs once per batch; two
sinks would run it twice or need a cache.

Why results leave Python as columns: a batch emits many windows, and encoding each as Avro in
Python cost ~24 µs a row (1.5 s for a 60,000-window batch, measured). Results cross to the JVM as
typed columns straight from the engine's arrays, and Spark's ``to_avro`` encodes them
(:func:`spark_jobs.reduce.job.sink_columns`); only the few other rows (chunks, dead letters, the
stats record) are encoded here, into ``value``. Results are keyed by job, window and key, so a
correction or a replayed batch's row replaces the same Kafka key (docs/reduce.md, "Delivery").
Each result's estimates under shedding and their errors (:mod:`spark_jobs.processors.sampling`)
are computed here from the row's sampling terms and cross as columns too.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pandas as pd

from ballast.avro.codec import AvroCodec
from spark_jobs.processors.batch import Results
from spark_jobs.processors.sampling import estimate
from spark_jobs.reduce.contract import ChunkOut, StepResult

RESULT, OTHER = 0, 1
RESULT_COLUMNS = (
    "r_key STRING, r_window_start LONG, r_window_end LONG, r_count LONG, r_sum DOUBLE, r_min DOUBLE, "
    "r_max DOUBLE, r_values ARRAY<DOUBLE>, r_revision INT, r_excluded LONG, r_epoch LONG, r_worker INT, "
    "r_exact BOOLEAN, r_sampled LONG, r_keep DOUBLE, r_est_count DOUBLE, r_rel_error DOUBLE, "
    "r_est_sum DOUBLE, r_count_se DOUBLE, r_sum_se DOUBLE, r_count_low DOUBLE, r_count_high DOUBLE, "
    "r_sum_low DOUBLE, r_sum_high DOUBLE"
)
# the estimate behind each double column (a NaN crosses as null: no estimate)
ESTIMATE_COLUMNS = {
    "r_keep": "keep_probability",
    "r_est_count": "estimated_count",
    "r_rel_error": "relative_error",
    "r_est_sum": "estimated_sum",
    "r_count_se": "count_std_error",
    "r_sum_se": "sum_std_error",
    "r_count_low": "count_low",
    "r_count_high": "count_high",
    "r_sum_low": "sum_low",
    "r_sum_high": "sum_high",
}
OUTPUT_SCHEMA = (
    "row_kind INT, topic STRING, partition INT, key BINARY, value BINARY, "
    "reason STRING, detail STRING, source_partition INT, source_offset LONG, " + RESULT_COLUMNS
    # on the stats row only: the worker and its watermark, observed into the batch's progress
    + ", w_worker INT, w_watermark LONG"
)
_COLUMNS = [c.strip().split(" ")[0] for c in OUTPUT_SCHEMA.split(",")]


def result_keys(job: str, results: Results) -> list[bytes]:
    """Each result's Kafka key: job and window first, the record key last (it may hold any text)."""
    return [
        f"{job}:{s}:{e}:{k}".encode()
        for s, e, k in zip(
            results.window_start.tolist(), results.window_end.tolist(), results.key.tolist(), strict=True
        )
    ]


class OutputEncoder:
    """Encodes one worker's step outputs (Avro with Ballast's single-object header, for the rows
    Python encodes; results are left to the JVM)."""

    def __init__(self, topics: dict[str, str], worker: int, job: str = "") -> None:
        self.topics = topics
        self.worker = worker
        self.job = job
        self._envelope = AvroCodec("io.ballast.RoutedEnvelope")
        self._metrics = AvroCodec("io.ballast.MetricsRecord")

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
        others: list[tuple[Any, ...]] = []
        routed = self.topics["routed"]
        for c in result.chunks:
            others.append(
                (OTHER, routed, c.to_worker, c.key.encode(), self.chunk_value(c), None, None, None, None)
            )
        dlq = self.topics["dead_letter"]
        for d in result.dead:
            others.append((OTHER, dlq, None, None, d.raw, d.reason, d.detail, self.worker, d.offset))
        stats_key = f"{self.job}/worker-{self.worker}".encode()
        others.append((OTHER, self.topics["metrics"], None, stats_key, self.stats_value(result.stats, now_ms),
                       None, None, None, None))  # fmt: skip
        r = result.results
        n, m = len(r), len(others)
        columns: dict[str, Any] = {}
        head = list(zip(*others, strict=True))  # the first nine columns of the other rows
        result_head: dict[str, Any] = {
            "row_kind": np.full(n, RESULT, dtype=object),
            "topic": np.full(n, self.topics["output"], dtype=object),
            "key": np.array(result_keys(self.job, r) if n else [], dtype=object),
        }
        for i, name in enumerate(_COLUMNS[:9]):
            mine = result_head.get(name, np.full(n, None, dtype=object))
            columns[name] = np.concatenate([mine, np.array(head[i], dtype=object)])
        present = np.concatenate([np.ones(n, dtype=bool), np.zeros(m, dtype=bool)])
        est = estimate(r.count, r.sum, r.excluded, r.terms)
        for name, values, kind in (
            ("r_window_start", r.window_start, "Int64"),
            ("r_window_end", r.window_end, "Int64"),
            ("r_count", r.count, "Int64"),
            ("r_excluded", r.excluded, "Int64"),
            ("r_epoch", np.full(n, epoch), "Int64"),
            ("r_revision", r.revision, "Int32"),
            ("r_worker", np.full(n, self.worker), "Int32"),
            ("r_sampled", est.sampled, "Int64"),
        ):
            dtype = np.int64 if kind == "Int64" else np.int32
            filled = np.concatenate([np.asarray(values, dtype=dtype), np.zeros(m, dtype=dtype)])
            columns[name] = pd.arrays.IntegerArray(filled, ~present)
        for name, values in (
            ("r_sum", r.sum),
            ("r_min", np.where(r.count > 0, r.min, np.nan)),
            ("r_max", np.where(r.count > 0, r.max, np.nan)),
        ):
            columns[name] = np.concatenate([np.asarray(values, dtype=np.float64), np.full(m, np.nan)])
        for name, field in ESTIMATE_COLUMNS.items():
            values = np.asarray(getattr(est, field), dtype=np.float64)
            columns[name] = np.concatenate([values, np.full(m, np.nan)])
        exact = np.concatenate([np.asarray(est.exact, dtype=bool), np.zeros(m, dtype=bool)])
        columns["r_exact"] = pd.arrays.BooleanArray(exact, ~present)
        columns["r_key"] = np.concatenate([np.asarray(r.key, dtype=object), np.full(m, None, dtype=object)])
        values = np.full(n + m, None, dtype=object)
        if r.values is not None:
            values[:n] = [list(v) for v in r.values]
        columns["r_values"] = values
        on_stats = np.zeros(n + m, dtype=bool)
        on_stats[-1] = True  # the stats row is the last one
        columns["w_worker"] = pd.arrays.IntegerArray(np.full(n + m, self.worker, dtype=np.int32), ~on_stats)
        watermark = np.full(n + m, int(result.stats.get("watermark_ms", 0)), dtype=np.int64)
        columns["w_watermark"] = pd.arrays.IntegerArray(watermark, ~on_stats)
        frame = pd.DataFrame(columns)
        for col in ("partition", "source_partition", "row_kind"):
            frame[col] = frame[col].astype("Int32")
        frame["source_offset"] = frame["source_offset"].astype("Int64")
        return frame[_COLUMNS]
