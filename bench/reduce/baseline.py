"""(a) Spark's own placement: the query a Spark user would write over the routed topic.

Why it is written here and not borrowed from the reduce job: the baseline must be what Spark
offers without Ballast. It reads the routed topic with Spark's Kafka source, decodes it with
``from_avro`` keeping the ``DataRecord`` branch only (markers and chunks are Ballast's business),
groups by key (``groupBy(key).transformWithStateInPandas``: one group = one key, a value state
and an event-time timer per key) and runs the same processor (``spark_jobs.processors``) with
the same per-record sleep as the job's workers. Results are ``OutputResult`` records on the
output topic. It runs in the benchmark's own SparkSession on the same state store
(``spark_jobs.session.SPARK_CONF``); Spark's shuffle puts a key in partition
``pmod(murmur3(key), 8)``.

Why a topic of its own for the load rows: each key's call writes one row (Spark partition,
records, late records) so the benchmark can count records per Spark partition and batch, as
``WorkerStats`` does for Ballast's workers. They are the benchmark's instrumentation, not Avro
metrics, so they stay off the metrics topic that every other reader decodes.
"""

from __future__ import annotations

import json
import struct
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from pyspark import cloudpickle
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle

from ballast.avro.codec import HEADER_LEN, AvroCodec
from ballast.kafka.configuration import KafkaConfig
from ballast.kafka.topics import TopicLayout, TopicSpec
from ballast.paths import SCHEMAS_DIR
from spark_jobs.processors.interface import KeyRecords, WindowResult
from spark_jobs.processors.spec import from_spec
from spark_jobs.record_cost import pay

# the benchmark runs as ``python -m bench.reduce``; Spark's Python workers need KeyedProcessor's
# code whether or not they can import the benchmark, so it travels by value
cloudpickle.register_pickle_by_value(sys.modules[__name__])

KEYED_OUTPUT = "topic STRING, key BINARY, value BINARY"
LOAD_ROW = "<iii"  # spark partition, records, late records
LOAD_ROLE = "bench_load"


def load_spec(layout: TopicLayout) -> TopicSpec:
    """The topic of (a)'s load rows (created with the placement's deployment)."""
    return TopicSpec(LOAD_ROLE, f"{layout.prefix}.bench-load", 1, doc="(a): one row per key call")


def load_row(value: bytes) -> tuple[int, int, int]:
    """(Spark partition, records, late records) of one load row."""
    partition, records, late = struct.unpack(LOAD_ROW, value)
    return partition, records, late


def session(workdir: Path, cores: int) -> Any:
    """The benchmark's SparkSession for (a): ``local[cores]``, RocksDB, no no-data batches.

    What the JVM and its Python workers print (a few lines per task) goes to ``spark-a.log`` in
    ``workdir``, as the jobs' output goes to their service logs, not between the benchmark's lines.
    """
    from spark_jobs.session import SPARK_CONF, local_spark

    conf = {
        **SPARK_CONF,
        "spark.sql.streaming.noDataMicroBatches.enabled": "false",
        "spark.sql.warehouse.dir": str(workdir / "warehouse"),
        "spark.sql.streaming.numRecentProgressUpdates": "1000",
        "spark.ui.showConsoleProgress": "false",
    }
    return local_spark(
        "ballast-bench-reduce",
        cores=cores,
        shuffle_partitions=cores,
        conf=conf,
        log_level="ERROR",
        output=workdir / "spark-a.log",
    )


def data_rows(spark: Any, kafka: KafkaConfig, topic: str, watermark_delay: str) -> Any:
    """The routed topic's data records as (key, offset, event_time ms, value), with a watermark.

    Every value on the routed topic is a ``RoutedEnvelope`` in Avro's single-object encoding: a
    header, then the body ``from_avro`` reads. The watermark is declared on the event time and
    that column dropped, as the reduce job does: Spark advances the watermark and fires timers,
    but the late rows reach the processor, which counts and skips them like the job's workers.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro

    schema = (SCHEMAS_DIR / "routed_envelope.avsc").read_text()
    raw = (
        spark.readStream.format("kafka")
        .options(**kafka.spark_source_options())  # connection and security, read_committed
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("failOnDataLoss", "true")
        .load()
    )
    envelope = from_avro(F.expr(f"substring(value, {HEADER_LEN + 1})"), json.dumps(json.loads(schema)))
    data = raw.select("offset", envelope["body"]["member0"].alias("d")).where(F.col("d").isNotNull())
    rows = data.select(
        F.col("d.key").alias("key"),
        "offset",
        F.unix_millis(F.col("d.event_time")).alias("event_time"),
        F.col("d.value").alias("value"),
        F.col("d.event_time").alias("wm_time"),
    )
    return rows.withWatermark("wm_time", watermark_delay).drop("wm_time")


def start_query(
    spark: Any,
    kafka: KafkaConfig,
    layout: TopicLayout,
    *,
    job: str,
    processor: str,
    record_cost_us: float,
    watermark_delay: str,
    trigger: str,
    checkpoint: Path,
) -> Any:
    """Start (a)'s streaming query; the ``StreamingQuery``."""
    topics = {"output": layout.name("output"), "load": load_spec(layout).name}
    rows = data_rows(spark, kafka, layout.name("routed"), watermark_delay)
    out = rows.groupBy("key").transformWithStateInPandas(
        statefulProcessor=KeyedProcessor(processor, record_cost_us / 1e6, topics, job),
        outputStructType=KEYED_OUTPUT,
        outputMode="Update",
        timeMode="EventTime",
    )
    return (
        out.writeStream.format("kafka")
        .queryName(job)
        .options(**kafka.spark_sink_options())
        .option("checkpointLocation", str(checkpoint))
        .outputMode("update")
        .trigger(processingTime=trigger)
        .start()
    )


def result_value(codec: AvroCodec, r: WindowResult, job: str) -> bytes:
    """A window's ``OutputResult``: the fields the reduce job fills, no worker, nothing shed."""
    return codec.encode(
        {
            "key": r.key,
            "job": job,
            "window_start": int(r.window_start),
            "window_end": int(r.window_end),
            "count": int(r.count),
            "sum": float(r.sum),
            "min": None if r.min is None else float(r.min),
            "max": None if r.max is None else float(r.max),
            "mean": None if r.mean is None else float(r.mean),
            "values": [float(v) for v in r.values],
            "worker": -1,
            "epoch": 0,
            "keep_probability": 1.0,
            "estimated_count": float(r.count),
            "relative_error": 0.0,
            "exact": True,  # nothing is shed here: every estimate is what was seen
            "sampled_records": 0,
            "estimated_sum": float(r.sum),
            "count_std_error": 0.0,
            "sum_std_error": 0.0,
            "count_low": float(r.count),
            "count_high": float(r.count),
            "sum_low": float(r.sum),
            "sum_high": float(r.sum),
            "min_max_are_bounds": False,
        }
    )


def load_key_state(processor: Any, value_state: Any) -> tuple[Any, int | None]:
    """A key's processor state and its registered timer (none) from its value state
    (``blob BINARY, timer LONG``; -1: no timer)."""
    stored = value_state.get()
    if stored is None:
        return processor.init(), None
    timer = int(stored[1]) if stored[1] is not None and stored[1] >= 0 else None
    return processor.decode(bytes(stored[0])), timer


def emit_and_store(
    processor: Any,
    handle: StatefulProcessorHandle,
    value_state: Any,
    key: str,
    state: Any,
    timer: int | None,
    watermark: int,
) -> list[WindowResult]:
    """The end of a key's call: the windows the watermark closed, the timer moved only when the
    next due window moved, and the state stored with its timer (or cleared when empty)."""
    results: list[WindowResult] = []
    due = processor.next_due(state)
    if due is not None and due <= watermark:
        results, state = processor.emit(key, state, watermark)
        due = processor.next_due(state)
    if timer is not None and timer != due:
        handle.deleteTimer(timer)
        timer = None
    if due is not None and timer is None:
        handle.registerTimer(int(due))
    if processor.is_empty(state):
        value_state.clear()
    else:
        value_state.update((bytearray(processor.encode(state)), -1 if due is None else int(due)))
    return results


class KeyedProcessor(StatefulProcessor):
    """One key per group: the same processor and the same per-record sleep as the reduce job's
    worker, with the key's state in a value state and one event-time timer per key."""

    def __init__(
        self, processor: str, record_cost_s: float, topics: dict[str, str], job: str, cost_kind: str = "sleep"
    ) -> None:
        self.spec = processor
        self.cost = record_cost_s
        self.cost_kind = cost_kind  # spark_jobs.record_cost: sleep or cpu
        self.topics = topics  # "output", and "load" for the load rows (none: not written)
        self.job = job

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.state = handle.getValueState("state", "blob BINARY, timer LONG")
        self.processor = from_spec(self.spec)
        self.codec = AvroCodec("io.ballast.OutputResult")

    def handleInputRows(self, key, rows, timerValues) -> Iterator[pd.DataFrame]:
        frame = pd.concat(list(rows), ignore_index=True).sort_values("offset", kind="stable")
        watermark = max(int(timerValues.getCurrentWatermarkInMs()), 0)
        times = frame["event_time"].to_numpy(dtype=np.int64)
        values = frame["value"].to_numpy(dtype=np.float64)
        fresh = times >= watermark
        records = KeyRecords(times[fresh], values[fresh])
        if self.cost:
            pay(len(records) * self.cost, self.cost_kind)
        state, timer = self._load()
        if len(records):
            state = self.processor.process(key[0], records, state)
        yield self._finish(key[0], state, timer, watermark, len(records), int((~fresh).sum()))

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo) -> Iterator[pd.DataFrame]:
        state, _timer = self._load()  # the timer fired: Spark removed it
        watermark = max(int(timerValues.getCurrentWatermarkInMs()), 0)
        yield self._finish(key[0], state, None, watermark, 0, 0)

    def _load(self) -> tuple[Any, int | None]:
        return load_key_state(self.processor, self.state)

    def _finish(
        self, key: str, state: Any, timer: int | None, watermark: int, n: int, late: int
    ) -> pd.DataFrame:
        from pyspark import TaskContext

        closed = emit_and_store(self.processor, self.handle, self.state, key, state, timer, watermark)
        output = self.topics["output"]
        rows: list[tuple[str, bytes | None, bytes]] = [
            (output, f"{self.job}:{r.window_start}:{key}".encode(), result_value(self.codec, r, self.job))
            for r in closed
        ]
        if "load" in self.topics:
            context = TaskContext.get()
            partition = context.partitionId() if context is not None else -1
            rows.append((self.topics["load"], b"bench-load", struct.pack(LOAD_ROW, partition, n, late)))
        return pd.DataFrame(rows, columns=["topic", "key", "value"])

    def close(self) -> None:
        pass
