"""The native peer: what a Spark user writes for a mergeable windowed aggregate, and its process.

The query: Spark's Kafka source on the routed topic, the ``RoutedEnvelope`` decoded with
``from_avro`` keeping the data records (markers are Ballast's business; a user without Ballast
would decode their own records the same way), ``withWatermark(event_time, delay)``,
``groupBy(window(event_time, size), key).agg(count, sum, min, max, avg)`` in append mode (a
window is written once, when the watermark passes its end, as Ballast writes it), and one Kafka
sink writing each window as an ``OutputResult`` with Spark's ``to_avro``: the record Ballast's
job writes, encoded the same way, so the two do the same output work and the benchmark reads
both outputs with one codec.

Why the routed topic and not the input topic: both contenders then read the very same Kafka
records with the same batch cap, so every batch holds the same records in both and the only
difference is what happens after the source. The input topic has other partitions (4, not 8),
so its batches would differ.

Why a process of its own (``python -m bench.reduce.native``): the reduce job is a process with a
Spark of its own; the native query gets the same, a fresh ``local[cores]`` JVM per run, so JIT
warm-up, memory and start-up are alike for both, and only one Spark works at a time.

State store: ``--store rocksdb`` is Ballast's own store configuration
(``spark_jobs.session.SPARK_CONF``: RocksDB, changelog checkpointing, no row counting);
``--store hdfs`` leaves Spark's default provider (HDFS-backed, in memory between batches), which
``transformWithStateInPandas`` cannot use.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ballast.avro.codec import HEADER_LEN, default_store
from ballast.cli.connection import ConnectionSettings
from ballast.kafka.configuration import KafkaConfig
from ballast.paths import SCHEMAS_DIR

PROVIDER = "spark.sql.streaming.stateStore.providerClass"
STORES = ("rocksdb", "hdfs")
STOP_GRACE_S = 60.0


def store_conf(store: str) -> dict[str, str]:
    """The Spark options of a state store choice (the same as the job's for ``rocksdb``)."""
    from spark_jobs.session import SPARK_CONF

    if store == "rocksdb":
        return dict(SPARK_CONF)
    if store == "hdfs":
        return {k: v for k, v in SPARK_CONF.items() if k != PROVIDER}
    raise ValueError(f"unknown store {store!r} (one of {', '.join(STORES)})")


def data_records(
    spark: Any, kafka: KafkaConfig, topic: str, max_offsets: int, kafka_columns: tuple[str, ...] = ()
) -> Any:
    """The routed topic's data records: (key, value, event_time timestamp), after the Kafka source's
    ``kafka_columns`` (the partition stage keeps ``partition``)."""
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro

    schema = json.dumps(json.loads((SCHEMAS_DIR / "routed_envelope.avsc").read_text()))
    reader = (
        spark.readStream.format("kafka")
        .options(**kafka.spark_source_options())  # read_committed, like the job
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("failOnDataLoss", "true")
    )
    if max_offsets:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets))
    envelope = from_avro(F.expr(f"substring(value, {HEADER_LEN + 1})"), schema)
    d = F.col("env.body.member0")
    return (
        reader.load()
        .select(*kafka_columns, envelope.alias("env"))
        .where(d.isNotNull())
        .select(
            *kafka_columns,
            d["key"].alias("key"),
            d["value"].alias("value"),
            d["event_time"].alias("event_time"),
        )
    )


def windowed(records: Any, window: str, watermark_delay: str) -> Any:
    """Count, sum, min, max and mean per key and tumbling window, closed by the watermark."""
    from pyspark.sql import functions as F

    return (
        records.withWatermark("event_time", watermark_delay)
        .groupBy(F.window("event_time", window), "key")
        .agg(
            F.count(F.lit(1)).alias("count"),
            F.sum("value").alias("sum"),
            F.min("value").alias("min"),
            F.max("value").alias("max"),
            F.avg("value").alias("mean"),
        )
    )


def output_rows(aggregates: Any, job: str) -> Any:
    """Each window as the job writes it: key ``job:start:end:key``, value an ``OutputResult``
    (Ballast's single-object header, then Spark's ``to_avro``)."""
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import to_avro

    version = default_store().current("io.ballast.OutputResult")
    schema = json.dumps(json.loads((SCHEMAS_DIR / "output_result.avsc").read_text()))
    start, end = F.col("window.start"), F.col("window.end")
    record = F.struct(
        F.col("key"),
        F.lit(job).alias("job"),
        start.alias("window_start"),
        end.alias("window_end"),
        F.col("count"),
        F.col("sum"),
        F.col("min"),
        F.col("max"),
        F.col("mean"),
        F.array().cast("array<double>").alias("values"),
        F.lit(-1).alias("worker"),
        F.lit(0).cast("long").alias("epoch"),
        F.lit(0).alias("revision"),
        F.lit(0).cast("long").alias("excluded_records"),
        F.lit(1.0).alias("keep_probability"),
        F.col("count").cast("double").alias("estimated_count"),
        F.lit(0.0).alias("relative_error"),
        F.lit(True).alias("exact"),  # nothing is shed here: every estimate is what was seen
        F.lit(0).cast("long").alias("sampled_records"),
        F.col("sum").alias("estimated_sum"),
        F.lit(0.0).alias("count_std_error"),
        F.lit(0.0).alias("sum_std_error"),
        F.col("count").cast("double").alias("count_low"),
        F.col("count").cast("double").alias("count_high"),
        F.col("sum").alias("sum_low"),
        F.col("sum").alias("sum_high"),
        F.lit(False).alias("min_max_are_bounds"),
    )
    key = F.concat_ws(":", F.lit(job), F.unix_millis(start), F.unix_millis(end), F.col("key"))
    return aggregates.select(
        key.cast("binary").alias("key"),
        F.concat(F.lit(version.header), to_avro(record, schema)).alias("value"),
    )


def start_query(
    spark: Any,
    kafka: KafkaConfig,
    *,
    topic: str,
    output_topic: str,
    job: str,
    window: str,
    watermark_delay: str,
    trigger: str,
    max_offsets: int,
    checkpoint: str,
) -> Any:
    """Start the native query; the ``StreamingQuery``."""
    rows = output_rows(windowed(data_records(spark, kafka, topic, max_offsets), window, watermark_delay), job)
    return (
        rows.writeStream.format("kafka")
        .queryName(job)
        .options(**kafka.spark_sink_options())  # acks and idempotence like the job's sink
        .option("topic", output_topic)
        .option("checkpointLocation", checkpoint)
        .outputMode("append")
        .trigger(processingTime=trigger)
        .start()
    )


def add_query_arguments(ap: argparse.ArgumentParser, partitions_help: str) -> None:
    """The options every contender process of the throughput bench takes (this query's and the
    partition stage's)."""
    ConnectionSettings.add_arguments(ap)
    ap.add_argument("--topic", required=True, help="the routed topic to read")
    ap.add_argument("--output-topic", required=True)
    ap.add_argument("--job", required=True, help="query name, written into every result")
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--window", default="10 seconds")
    ap.add_argument("--watermark-delay", default="10 seconds")
    ap.add_argument("--trigger", default="2 seconds")
    ap.add_argument("--max-offsets-per-trigger", type=int, default=0)
    ap.add_argument("--local-cores", type=int, default=2)
    ap.add_argument("--partitions", type=int, default=8, help=partitions_help)
    ap.add_argument("--spark-log", default="", help="file for Spark's own output")
    ap.add_argument("--spark-conf", default="", help="more Spark options, KEY=VALUE,KEY=VALUE")


def contender_spark(args: argparse.Namespace, conf: dict[str, str]) -> Any:
    """A ``local[cores]`` Spark of the contender's own, ``conf`` plus the ``--spark-conf`` pairs."""
    from spark_jobs.session import local_spark

    conf = conf | {"spark.ui.showConsoleProgress": "false"}
    for pair in filter(None, args.spark_conf.split(",")):
        key, _sep, value = pair.partition("=")
        conf[key.strip()] = value.strip()
    return local_spark(
        f"bench-reduce-{args.job}",
        cores=args.local_cores,
        shuffle_partitions=args.partitions,
        conf=conf,
        log_level="WARN",
        output=Path(args.spark_log) if args.spark_log else None,
    )


def run_until_signalled(spark: Any, start: Callable[[], Any], label: str) -> int:
    """Start the query and run it until SIGTERM or SIGINT, then stop it between batches (a running
    batch is measured, so it may finish); Spark is stopped whatever happens."""
    stop = {"now": False}

    def on_signal(_signum: int, _frame: object) -> None:
        stop["now"] = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        query = start()
        print(f"{label} started", file=sys.stderr, flush=True)
        while query.isActive and not stop["now"]:
            query.awaitTermination(0.5)
        if query.exception() is not None:
            print(f"{label}: the query failed: {query.exception()}", file=sys.stderr, flush=True)
            return 1
        deadline = time.monotonic() + STOP_GRACE_S
        while query.isActive and query.status.get("isTriggerActive") and time.monotonic() < deadline:
            time.sleep(0.05)
        query.stop()
    finally:
        spark.stop()
    return 0


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench.reduce.native", description=__doc__.splitlines()[0])
    add_query_arguments(ap, "shuffle (state) partitions")
    ap.add_argument("--store", choices=STORES, default="rocksdb")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the query until SIGTERM, then stop it between batches."""
    args = parse(argv)
    kafka = ConnectionSettings.from_args(args).checked_kafka_config("bench-reduce-native")
    spark = contender_spark(args, store_conf(args.store))

    def start() -> Any:
        return start_query(
            spark,
            kafka,
            topic=args.topic,
            output_topic=args.output_topic,
            job=args.job,
            window=args.window,
            watermark_delay=args.watermark_delay,
            trigger=args.trigger,
            max_offsets=args.max_offsets_per_trigger,
            checkpoint=args.checkpoint,
        )

    return run_until_signalled(spark, start, f"native: query {args.job} ({args.store} state store)")


if __name__ == "__main__":
    sys.exit(main())
