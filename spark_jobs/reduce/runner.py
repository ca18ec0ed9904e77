"""Start the reduce job: find its workers and inputs on the broker, build the query, report progress.

Why the worker count and input partitions come from the broker: the routed topic's partition
count *is* the number of workers (the checkpoint freezes it), and the frontier needs every
partition of the input topics, not whichever routers happen to be alive.
"""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Callable

from ballast.kafka.admin import make_admin, partition_count
from ballast.kafka.config import KafkaConfig
from ballast.kafka.topics import TopicLayout
from spark_jobs.processors.spec import from_spec
from spark_jobs.reduce.config import ReduceSettings
from spark_jobs.reduce.frontier import partition_id
from spark_jobs.reduce.stateful import JobSpec

STATUS_EVERY_S = 5.0


def job_spec(
    spark,
    kafka: KafkaConfig,
    layout: TopicLayout,
    settings: ReduceSettings,
    input_topics: tuple[str, ...] = (),
) -> JobSpec:
    from spark_jobs.reduce.placement import worker_labels

    from_spec(settings.processor)  # a bad processor spec fails here, before Spark starts anything
    admin = make_admin(kafka)
    topics = {role: layout.name(role) for role in ("routed", "control", "output", "metrics", "dead_letter")}
    workers = partition_count(admin, topics["routed"])
    inputs = input_topics or (layout.name("input"),)
    partitions = tuple(partition_id(t, p) for t in inputs for p in range(partition_count(admin, t)))
    return JobSpec(
        job=settings.job_id,
        bootstrap=kafka.bootstrap_servers,
        topics=topics,
        routed_partitions=workers,
        labels=tuple(worker_labels(spark, workers)),
        processor=settings.processor,
        input_partitions=partitions,
        bins=settings.bins,
        chunk_bytes=settings.chunk_bytes,
        control_timeout_s=settings.control_timeout_s,
        record_cost_us=settings.record_cost_us,
    )


def run_job(
    spark,
    spec: JobSpec,
    settings: ReduceSettings,
    say: Callable[[str], None] = lambda s: print(s, file=sys.stderr, flush=True),
) -> int:
    """Run until stopped (SIGTERM/SIGINT), ``run_for_s`` elapsed, or the query fails (exit 1)."""
    from spark_jobs.reduce.job import build_query

    query = build_query(
        spark,
        spec,
        str(settings.checkpoint),
        watermark_delay=settings.watermark_delay,
        trigger=settings.trigger,
        max_offsets=settings.max_offsets_per_trigger,
    )
    stop = {"now": False}

    def on_signal(signum: int, _frame: object) -> None:
        stop["now"] = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    say(
        f"reduce: {spec.routed_partitions} workers (labels {list(spec.labels)}), processor "
        f"{spec.processor}, {len(spec.input_partitions)} input partitions, checkpoint {settings.checkpoint}"
    )
    started = last = time.monotonic()
    reported = -1
    while query.isActive and not stop["now"]:
        if settings.run_for_s and time.monotonic() - started >= settings.run_for_s:
            break
        query.awaitTermination(0.5)
        if time.monotonic() - last >= STATUS_EVERY_S:
            last = time.monotonic()
            p = query.lastProgress
            if p and p["batchId"] != reported and p["numInputRows"]:
                reported = p["batchId"]
                d = p["durationMs"]
                say(
                    f"reduce: batch {p['batchId']}, {p['numInputRows']} rows in "
                    f"{d.get('triggerExecution', 0)} ms (addBatch {d.get('addBatch', 0)}, "
                    f"planning {d.get('queryPlanning', 0)}, offsets {d.get('latestOffset', 0)}, "
                    f"wal {d.get('walCommit', 0)}, commit {d.get('commitOffsets', 0)}), "
                    f"watermark {p['eventTime'].get('watermark', '-')}"
                )
    if query.exception() is not None:
        say(f"reduce: the query failed: {query.exception()}")
        return 1
    query.stop()
    return 0
