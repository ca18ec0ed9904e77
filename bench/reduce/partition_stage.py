"""A prototype peer: the windowed aggregate as a stateless per-partition stage, no state operator.

The question (issue 30): Ballast's reduce reaches ~0.8-0.9x Spark's native windowed aggregation
on the same store, and going past 1.0x was estimated to need not sending every row through Spark's
state operator. This process measures that design before anyone commits to it.

The query: the routed topic's data records as :func:`bench.reduce.native.data_records` decodes
them (``from_avro`` in the JVM), also keeping the Kafka ``partition``; then ``foreachBatch``:

* the **watermark** of batch N is computed on the driver by Spark's own rule for the native query:
  (the max event time of every batch before N) - delay, never moving back, 0 before any record;
  so both queries close the same windows in the same batches. The driver learns each batch's max
  from the tasks (below), and keeps it with each batch in ``--stage-log`` (read back on start);
* ``batch_df.mapInArrow(task)``: Spark's Kafka source gives one Spark partition per Kafka
  partition (``minPartitions`` unset), and ``mapInArrow`` keeps them, so each routed partition
  is one task, one worker, and the plan has **no Exchange** (checked: the executed plan is
  written to ``--stage-log`` with its count of ``Exchange`` nodes). The task
  (:mod:`bench.reduce.partition_task`) folds its records vectorised (pandas ``groupby`` on
  (key, window start): the map-side partial aggregate), merges them into the partition's state,
  closes the windows the watermark passed (:mod:`bench.reduce.partition_fold`: rules equal to
  Spark's, late = the record's window already closed), and yields those windows plus one stats
  row (the partition's max event time, late records, ...);
* with ``--task-writes-output`` (the ``partition-stage-direct`` contender) each task encodes its
  closed windows (the same ``OutputResult``, key and header) and sends them with the producer it
  holds for the changelog, acked with it; the driver collects the stats rows only: one Spark job a
  batch, no cache, no JVM encoder or Kafka sink. Otherwise:
* the task's output is **persisted** once: the closed windows go to the output topic through
  ``write.format("kafka")``, encoded by :func:`bench.reduce.native.output_rows` (the same
  ``OutputResult``, the same header), then the stats rows are collected from the cache. The fold
  runs once per batch (it has side effects: state files, changelog);
* **idle partitions**: a Kafka partition with no new records in a batch gets no task, so its
  windows would stay open; when the watermark passes a partition's oldest open window (the driver
  knows it from the last stats row), the driver runs a small job with one keyless tick row for it.
  With a backlog read at a cap every partition has records in every batch, so it never runs here.

State: per partition one file under ``--stage-state-dir`` (:mod:`bench.reduce.partition_store`: a
pickled state written atomically, holding the batch id so a replayed batch is not folded twice,
and the windows it closed, given again) and an in-process cache for a reused Python worker. Each
batch's changed entries and a tombstone per closed window also go to a compacted changelog topic
(``--changelog-topic``, one partition per routed partition; the producer in the task waits for
the acks before the task ends), so the measured cost holds what a recoverable design pays.

With ``--exactly-once`` (the ``partition-stage-eos`` contender) each task writes its changelog
records, a meta record holding the batch id, and its closed windows in one Kafka transaction of a
producer fenced per partition, held by the host's agent (:mod:`bench.reduce.partition_exactly_once`,
:mod:`bench.reduce.partition_agent`; the stage stops the agent when it stops): a ``read_committed``
reader sees every window once across crashes and replays, a zombie attempt is fenced, and a host
without the state file (or with a stale one) rebuilds it from the committed changelog. Spark's
checkpoint still owns the source offsets: the batch id in the changelog is what makes a rerun
batch a no-op, since Spark reruns a batch with the offsets its offset log fixed.

What the prototype does not do (a production version would):

* migration, routing updates, shedding and dead letters: the stage folds one mergeable aggregate;
* no-data batches: Spark runs a batch without new records only for a stateful query, so the
  windows the last data batch's max would close are written when the next records arrive (the
  native query writes them in a no-data batch). The benchmark's check reads each run's last
  watermark, so it checks each contender on the windows it closed.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from pathlib import Path
from typing import Any

from ballast.cli.connection import ConnectionSettings
from ballast.kafka.configuration import KafkaConfig
from bench.reduce import partition_agent_client
from bench.reduce.native import (
    add_query_arguments,
    contender_spark,
    data_records,
    output_rows,
    run_until_signalled,
)
from bench.reduce.partition_fold import NO_EVENT
from bench.reduce.partition_task import OUTPUT_DDL, TaskConfig, run_task

CHANGELOG_CONFIG = {"cleanup.policy": "compact", "retention.ms": "-1"}


def duration_ms(text: str) -> int:
    """Spark's interval text (``10 seconds``, ``500 milliseconds``) in milliseconds."""
    number, _sep, unit = text.strip().partition(" ")
    scale = {"millisecond": 1, "second": 1000, "minute": 60_000}[unit.rstrip("s") or "second"]
    return int(float(number) * scale)


class Stage:
    """The ``foreachBatch`` function and the driver's little state (watermark, per-partition ends)."""

    def __init__(self, spark: Any, kafka: KafkaConfig, args: argparse.Namespace) -> None:
        self.spark = spark
        self.kafka = kafka
        self.output_topic = args.output_topic
        self.job = args.job
        self.delay_ms = duration_ms(args.watermark_delay)
        direct = args.task_writes_output or args.exactly_once
        self.cfg = TaskConfig(args.stage_state_dir, duration_ms(args.window), kafka, args.changelog_topic,
                              args.output_topic if direct else "", args.job, args.exactly_once)  # fmt: skip
        self.log_path = Path(args.stage_log)
        self.max_seen = NO_EVENT
        self.watermark = 0
        self.open_end: dict[int, int | None] = {}
        self.done: dict[int, dict] = {}  # batch id -> its log row (a replay reuses its watermark)
        self.planned = False
        for line in self.log_path.read_text().splitlines() if self.log_path.exists() else ():
            row = json.loads(line)
            if "batch" in row:
                self.done[row["batch"]] = row
                self.max_seen = max(self.max_seen, row["max_seen_ms"])
                self.watermark = max(self.watermark, row["watermark_ms"])
                self.open_end.update({int(k): v for k, v in row["open_end"].items()})

    def watermark_for(self, batch_id: int) -> int:
        if batch_id in self.done:
            return int(self.done[batch_id]["watermark_ms"])
        if self.max_seen == NO_EVENT:
            return self.watermark
        return max(self.watermark, self.max_seen - self.delay_ms)

    def _write_log(self, row: dict) -> None:
        with open(self.log_path, "a") as f:
            f.write(json.dumps(row) + "\n")

    def _run(self, frame: Any, batch_id: int, watermark: int) -> list[Any]:
        """The tasks over ``frame``: their windows written to the output topic; their stats rows."""
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        out = frame.mapInArrow(functools.partial(run_task, self.cfg, batch_id, watermark), OUTPUT_DDL)
        if not self.planned:
            self.planned = True
            plan = out._jdf.queryExecution().executedPlan().toString()
            self._write_log({"plan": plan, "exchanges": plan.count("Exchange")})
            print(f"partition-stage: executed plan ({plan.count('Exchange')} Exchange):\n{plan}",
                  file=sys.stderr, flush=True)  # fmt: skip
        if self.cfg.output_topic:  # the tasks wrote their windows: only the stats rows come back
            return out.collect()
        out = out.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            windows = out.where(F.col("key").isNotNull()).select(
                F.struct(
                    F.timestamp_millis("window_start").alias("start"),
                    F.timestamp_millis("window_end").alias("end"),
                ).alias("window"),
                "key", "count", "sum", "min", "max", "mean",
            )  # fmt: skip
            (
                output_rows(windows, self.job)
                .write.format("kafka")
                .options(**self.kafka.spark_sink_options())
                .option("topic", self.output_topic)
                .save()
            )
            return out.where(F.col("key").isNull()).collect()
        finally:
            out.unpersist()

    def __call__(self, batch_df: Any, batch_id: int) -> None:
        started = time.monotonic()
        watermark = self.watermark_for(batch_id)
        stats = self._run(batch_df.select("partition", "key", "value", "t"), batch_id, watermark)
        seen = {int(r["partition"]) for r in stats}
        idle = sorted(
            p for p, end in self.open_end.items() if p not in seen and end is not None and end <= watermark
        )
        if idle:
            ticks = self.spark.createDataFrame(
                self.spark.sparkContext.parallelize([(p, None, None, None) for p in idle], len(idle)),
                "partition int, key string, value double, t long",
            )
            stats += self._run(ticks, batch_id, watermark)
        for r in stats:
            if r["max_event_ms"] is not None:
                self.max_seen = max(self.max_seen, int(r["max_event_ms"]))
            self.open_end[int(r["partition"])] = r["open_min_end"]
        self.watermark = watermark
        row = {
            "batch": batch_id,
            "watermark_ms": watermark,
            "max_seen_ms": self.max_seen,
            "tasks": len(stats),
            "idle_closed": idle,
            "late": sum(int(r["late"]) for r in stats),
            "state_rows": sum(int(r["state_rows"]) for r in stats),
            "changelog_records": sum(int(r["changelog"]) for r in stats),
            "task_ms": [round(float(r["fold_ms"]), 1) for r in stats],
            "worker_pids": sorted({int(r["worker_pid"]) for r in stats}),
            "cache_reads": [int(r["cache_reads"]) for r in stats],
            "restored": sum(1 for r in stats if r["restored"]),
            "phase_ms": phase_totals(stats),
            "open_end": self.open_end,
            "driver_s": round(time.monotonic() - started, 3),
        }
        self.done[batch_id] = row
        self._write_log(row)


def phase_totals(stats: list[Any]) -> dict[str, float]:
    """The exactly-once tasks' time per phase, summed over the batch's tasks (empty otherwise)."""
    totals: dict[str, float] = {}
    for r in stats:
        for phase, ms in json.loads(r["phase_ms"] or "{}").items():
            totals[phase] = round(totals.get(phase, 0.0) + ms, 1)
    return totals


def ensure_changelog(kafka: KafkaConfig, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient

    from ballast.kafka.admin import ensure_topics
    from ballast.kafka.topics import TopicSpec

    admin = AdminClient(kafka.admin())
    ensure_topics(admin, [TopicSpec("changelog", topic, partitions, CHANGELOG_CONFIG)])


def start_query(spark: Any, kafka: KafkaConfig, args: argparse.Namespace) -> Any:
    """Start the stage's query; the ``StreamingQuery``."""
    from pyspark.sql import functions as F

    records = data_records(spark, kafka, args.topic, args.max_offsets_per_trigger, ("partition",))
    rows = records.select("partition", "key", "value", F.unix_millis("event_time").alias("t"))
    return (
        rows.writeStream.foreachBatch(Stage(spark, kafka, args))
        .queryName(args.job)
        .option("checkpointLocation", args.checkpoint)
        .trigger(processingTime=args.trigger)
        .start()
    )


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m bench.reduce.partition_stage", description=__doc__.splitlines()[0]
    )
    add_query_arguments(ap, "routed partitions (changelog partitions)")
    ap.add_argument("--stage-state-dir", required=True, help="the partitions' local state files")
    ap.add_argument("--changelog-topic", required=True, help="compacted, created if missing")
    ap.add_argument("--stage-log", required=True, help="one JSON line per batch (watermark, max, ...)")
    ap.add_argument(
        "--task-writes-output",
        action="store_true",
        help="each task writes its closed windows with its own producer (one job a batch, no cache)",
    )
    ap.add_argument(
        "--exactly-once",
        action="store_true",
        help="each task writes its changelog and windows in one Kafka transaction "
        "(implies --task-writes-output)",
    )
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the query until SIGTERM, then stop it between batches."""
    from spark_jobs.session import SPARK_CONF

    args = parse(argv)
    kafka = ConnectionSettings.from_args(args).checked_kafka_config("bench-reduce-partition-stage")
    ensure_changelog(kafka, args.changelog_topic, args.partitions)
    spark = contender_spark(args, dict(SPARK_CONF))
    label = f"partition-stage: query {args.job}"
    try:
        return run_until_signalled(spark, lambda: start_query(spark, kafka, args), label)
    finally:
        if args.exactly_once:
            partition_agent_client.stop_agent(kafka.bootstrap_servers, args.job)


if __name__ == "__main__":
    sys.exit(main())
