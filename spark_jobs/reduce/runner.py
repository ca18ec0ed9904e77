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
from datetime import UTC, datetime

from ballast.kafka.admin import make_admin, partition_count
from ballast.kafka.configuration import KafkaConfig
from ballast.kafka.identities import reduce_group_prefix
from ballast.kafka.topics import TopicLayout
from ballast.readiness import announce_ready
from spark_jobs.processors.spec import from_spec
from spark_jobs.reduce.config import ReduceSettings
from spark_jobs.reduce.frontier import partition_id
from spark_jobs.reduce.progress import JOB_WATERMARK, ProgressPublisher
from spark_jobs.reduce.stateful import JobSpec

STATUS_EVERY_S = 5.0
STOP_GRACE_S = 30.0  # how long a stop waits for the running batch to finish


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
        job=settings.resolved_job_id(layout.prefix),
        kafka=kafka,
        topics=topics,
        routed_partitions=workers,
        labels=tuple(worker_labels(spark, workers)),
        processor=settings.processor,
        input_partitions=partitions,
        group_prefix=reduce_group_prefix(layout.prefix),
        input_topics=tuple(inputs),
        bins=settings.bins,
        chunk_bytes=settings.chunk_bytes,
        control_timeout_s=settings.control_timeout_s,
        record_cost_us=settings.record_cost_us,
        record_cost_kind=settings.record_cost_kind,
        horizon_ms=settings.horizon_ms(),
        max_future_ms=settings.max_future_ms(),
        watermark_delay_ms=settings.watermark_delay_ms(),
        idle_timeout_ms=settings.idle_timeout_ms(),
    )


def run_job(
    spark,
    spec: JobSpec,
    settings: ReduceSettings,
    say: Callable[[str], None] = lambda s: print(s, file=sys.stderr, flush=True),
) -> int:
    """Run until stopped (SIGTERM/SIGINT), ``run_for_s`` elapsed, or the query fails (exit 1).

    Every batch's progress goes to the metrics topic (:mod:`spark_jobs.reduce.progress`); the job
    announces itself ready (:mod:`ballast.readiness`) once its query runs. A stop request stops
    the query between batches. When a signal reached Spark's JVM too (a whole process group or
    cgroup was signalled, as systemd does), the JVM may be gone before the query is stopped: the
    job then says so in one line and exits 0, since a stop was asked for and the checkpoint holds
    everything committed.
    """
    from spark_jobs.reduce.job import build_query

    query = build_query(
        spark,
        spec,
        str(settings.checkpoint),
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
    announce_ready(
        "reduce", job=spec.job, workers=spec.routed_partitions, checkpoint=str(settings.checkpoint)
    )
    progress = ProgressPublisher(
        spec.kafka, spec.topics["metrics"], spec.job, spec.topics["routed"], spec.routed_partitions
    )
    started = last = time.monotonic()
    unreported: list[dict] = []
    try:
        while query.isActive and not stop["now"]:
            if settings.run_for_s and time.monotonic() - started >= settings.run_for_s:
                break
            query.awaitTermination(0.5)
            unreported += progress.publish_new(query)
            if time.monotonic() - last >= STATUS_EVERY_S:
                last = time.monotonic()
                if unreported:
                    say(status_line(unreported))
                unreported = []
        failure = query.exception()
        if failure is not None:
            say(f"reduce: the query failed: {failure}")
            return 1
        unreported += progress.publish(query.recentProgress)
        if unreported:
            say(status_line(unreported))
        stop_between_batches(query)
    except Exception as exc:
        if not (stop["now"] and _jvm_gone(exc)):
            raise
        say("reduce: Spark's JVM stopped with this process (a signal to the whole group); exiting")
    finally:
        progress.close()
    return 0


def stop_between_batches(query, grace_s: float = STOP_GRACE_S) -> None:
    """Stop the query when no batch runs (waiting up to ``grace_s`` for the one that does).

    Why wait: ``query.stop()`` interrupts a running batch, and the interrupted Kafka clients and
    sink fill the log with stack traces of a stop that was asked for. A batch that finishes is
    committed; one interrupted is replayed at the next start, which is correct but slower.
    """
    deadline = time.monotonic() + grace_s
    while query.isActive and query.status.get("isTriggerActive") and time.monotonic() < deadline:
        time.sleep(0.05)
    query.stop()


def status_line(batches: list[dict]) -> str:
    """One line for every batch since the last line: how many, their rows and times, the watermark.

    Why all of them: a line per interval that showed only the latest batch hid the others (a slow
    batch between two fast ones never showed). Batch ids the query's recent progress no longer
    held when it was read (more batches in one poll than Spark keeps) are counted as not seen.
    """
    batches = sorted(batches, key=lambda p: int(p["batchId"]))
    first, last = int(batches[0]["batchId"]), int(batches[-1]["batchId"])
    unseen = (last - first + 1) - len(batches)
    times = sorted(int(p["durationMs"].get("triggerExecution", 0)) for p in batches)
    rows = sum(int(p.get("numInputRows", 0)) for p in batches)
    span = f"batch {first}" if first == last else f"batches {first}-{last}"
    time_part = (
        f"{times[0]} ms" if len(times) == 1 else f"{times[len(times) // 2]} ms median, {times[-1]} ms max"
    )
    ms = int(batches[-1].get(JOB_WATERMARK, 0))
    watermark = datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds") if ms else "-"
    more = f", {unseen} not seen (beyond Spark's recent progress)" if unseen else ""
    return f"reduce: {span}: {rows} rows, {time_part}{more}, watermark {watermark}"


def _jvm_gone(exc: BaseException) -> bool:
    """The error of a call into a JVM that no longer answers (Py4J's network error, a closed pipe)."""
    from py4j.protocol import Py4JError

    return isinstance(exc, (Py4JError, ConnectionError, EOFError, OSError))


def stop_spark(spark) -> None:
    """``spark.stop()``, quiet when the JVM is already gone (nothing is left to stop then)."""
    try:
        spark.stop()
    except Exception as exc:
        if not _jvm_gone(exc):
            raise
