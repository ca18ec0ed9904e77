"""The query of a placement, from outside: is it alive, what batches ran, what each worker did.

Why two kinds behind one face: (a) is the benchmark's own query in its own SparkSession
(:mod:`bench.reduce.baseline`); (b) and (c) are the reduce job as a service (``ballast reduce
run``), known only through Kafka. Driving a placement and computing its figures must not care
which: both give :class:`~bench.reduce.progress.BatchProgress` per batch and a
:class:`~bench.reduce.batches.WorkerSample` per worker step (or, for (a), per key call).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from ballast.harness.pipeline import Pipeline
from ballast.kafka.follow import TopicFollower
from ballast.metrics.records import ReduceProgress, WorkerStats
from bench.reduce.batches import WorkerSample
from bench.reduce.params import WORKERS, Params
from bench.reduce.progress import BatchProgress, of_metric, of_spark
from spark_jobs.query_progress import unseen_batches

# with no-data batches, every slice is followed by a batch that only fires timers (see the docstring
# of bench.reduce); the job takes Spark options through its --spark-conf setting
NO_DATA_BATCHES_OFF = "spark.sql.streaming.noDataMicroBatches.enabled=false"


class Query(Protocol):
    def check(self) -> None:
        """Raise if the query stopped (with what it said)."""

    def progress(self) -> dict[int, BatchProgress]:
        """Every batch that ran so far, by id."""

    def samples(self) -> list[WorkerSample]:
        """Every worker figure so far (call after :meth:`stop`: everything)."""

    def stop(self) -> None: ...


class BaselineQuery:
    """(a): the benchmark's own query; batches from its progress, loads from its load-row topic."""

    def __init__(
        self, spark: Any, pipe: Pipeline, params: Params, record_cost_us: float, checkpoint: Path
    ) -> None:
        from bench.reduce.baseline import load_spec, start_query

        self.pipe = pipe
        self.load_topic = load_spec(pipe.layout).name
        self.routed = pipe.layout.name("routed")
        self.query = start_query(
            spark,
            pipe.kafka,
            pipe.layout,
            job=f"{pipe.layout.prefix}-keyed",
            processor=params.processor,
            record_cost_us=record_cost_us,
            watermark_delay=params.watermark_delay,
            trigger=params.trigger,
            checkpoint=checkpoint,
        )
        self.seen: dict[int, BatchProgress] = {}
        self.last_batch = -1

    def check(self) -> None:
        if not self.query.isActive:
            raise RuntimeError(f"the query of {self.pipe.layout.prefix} stopped: {self.query.exception()}")

    def progress(self) -> dict[int, BatchProgress]:
        """Every batch seen so far. Polled every 0.2 s while draining, so the query's latest progress
        is read, and its recent ones (the last 1,000, the session's setting) only when a batch may have
        run unseen: handing all of them over on each poll cost the cores (a) runs on."""
        query = self.query
        for p in unseen_batches(self.last_batch, query.lastProgress, lambda: query.recentProgress):
            batch = of_spark(p, self.routed, WORKERS)
            if batch is not None:
                self.seen[batch.id] = batch
                self.last_batch = max(self.last_batch, batch.id)
        return self.seen

    def samples(self) -> list[WorkerSample]:
        from bench.reduce.baseline import load_row

        with TopicFollower(self.pipe.kafka, self.load_topic) as follower:
            rows = follower.read_to_end(120)
        out = []
        for m in rows:
            partition, records, late = load_row(m.value())
            out.append(WorkerSample(m.timestamp()[1], partition, records, late=late))
        return out

    def stop(self) -> None:
        self.progress()
        if self.query.isActive:
            self.query.stop()


class JobQuery:
    """(b), (c): ``ballast reduce run`` as a service of the placement's pipeline."""

    def __init__(self, pipe: Pipeline, params: Params, record_cost_us: float, checkpoint: Path) -> None:
        self.pipe = pipe
        self.job = f"{pipe.layout.prefix}-reduce"
        command = pipe.reduce(
            self.job,
            params.processor,
            checkpoint=checkpoint,
            local_cores=WORKERS,
            watermark_delay=params.watermark_delay,
            trigger=params.trigger,
            record_cost_us=record_cost_us,
            spark_conf=(NO_DATA_BATCHES_OFF,),
        )
        self.name = command.name
        pipe.start(command, wait=False)  # Spark starts while the other placements start theirs
        self.stopped = False

    def check(self) -> None:
        self.pipe.check_running(self.name)

    def progress(self) -> dict[int, BatchProgress]:
        reader = self.pipe.metrics()
        reader.poll(0.1)
        found = reader.of(ReduceProgress, source=f"{self.job}/driver")
        return {p.id: p for p in (of_metric(m, body) for m, body in found)}

    def samples(self) -> list[WorkerSample]:
        reader = self.pipe.metrics()
        reader.read_to_end(120)
        out = []
        for m, s in reader.of(WorkerStats, prefix=f"{self.job}/"):
            out.append(
                WorkerSample(
                    m.interval_end,
                    s.worker,
                    s.records,
                    late=s.late_records,
                    busy_ms=s.busy_ms,
                    latency_p50_ms=s.flow_latency_p50_ms if s.records else None,
                    latency_p99_ms=s.flow_latency_p99_ms if s.records else None,
                    chunks_sent=len(s.chunks_sent),
                    chunks_installed=len(s.chunks_installed),
                    held=s.held_records,
                    pending=s.pending_keys,
                )
            )
        return out

    def stop(self) -> None:
        """SIGTERM: the job stops its query between batches, having published every batch's progress."""
        if not self.stopped:
            self.stopped = True
            self.pipe.stop(self.name)
            self.pipe.metrics().read_to_end(120)
