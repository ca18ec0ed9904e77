"""The Spark side of a worker: a ``transformWithStateInPandas`` processor around :class:`WorkerStep`.

Why this is thin: everything that decides something lives in :mod:`spark_jobs.reduce.engine`,
which tests without Spark. Here only the grouping key becomes a worker number, the worker's state
goes in and out of Spark's state store (RocksDB, checkpointed with the offsets, so a restart
resumes both together), the control log is followed to its end (the emission rule asks it as of
now), the input topics' partitions are looked up (a partition added while the job runs joins the
frontier), and the event-time timer is kept at the earliest row a worker still has to look at.
The control log's end comes in the data (``CONTROL`` rows, :func:`spark_jobs.reduce.job.control_rows`),
so a replayed batch folds the log to the same epoch.

State, per worker (:mod:`spark_jobs.reduce.store`): a map of buckets (window start -> encoded
rows), a value with the engine's meta, a map of held record blocks, a map of chunk pieces.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle

from ballast.kafka.configuration import KafkaConfig
from spark_jobs.processors.batch import batch_processor
from spark_jobs.processors.spec import from_spec
from spark_jobs.reduce.engine import BAD, WorkerConfig, WorkerStep, dump_meta, load_meta
from spark_jobs.reduce.frontier import partition_id
from spark_jobs.reduce.outputs import OutputEncoder
from spark_jobs.reduce.ownership import shared_log
from spark_jobs.reduce.store import HeldRecords

INPUTS_TTL_S = 10.0  # how long a worker trusts its last look at the input topics' partitions


@dataclass(frozen=True)
class JobSpec:
    """Everything a worker task needs, pickled once with the processor when the query starts."""

    job: str  # the job id: its checkpoint's owner, written into every chunk it sends
    kafka: KafkaConfig  # the connection (security included) of the driver, for the executors too
    topics: dict[str, str]  # role -> topic name (ballast.kafka.topics roles)
    routed_partitions: int
    labels: tuple[int, ...]  # labels[w]: the grouping value of worker w (spark_jobs.reduce.placement)
    processor: str  # a spark_jobs.processors spec, e.g. "aggregate:size=10s"
    input_partitions: tuple[str, ...]
    input_topics: tuple[str, ...] = ()
    bins: int = 64  # hash bins of a per-key processor's states
    chunk_bytes: int = 512 * 1024
    control_timeout_s: float = 60.0
    record_cost_us: float = 0.0
    horizon_ms: int = 0
    max_future_ms: int = 0


class _SparkStore:
    """:class:`~spark_jobs.reduce.store.StateStore` over one worker's state variables."""

    def __init__(self, buckets, held, pieces) -> None:
        self._buckets = buckets
        self._held = held
        self._pieces = pieces

    def get_bucket(self, bucket: int) -> bytes | None:
        value = self._buckets.getValue((bucket,))
        return None if value is None else bytes(value[0])

    def put_bucket(self, bucket: int, blob: bytes) -> None:
        self._buckets.updateValue((bucket,), (bytearray(blob),))

    def remove_bucket(self, bucket: int) -> None:
        self._buckets.removeKey((bucket,))

    def append_held(self, held: HeldRecords) -> None:
        # a block's id: its first record's routed offset (unique within the worker's partition)
        self._held.updateValue((int(held.seq.min()),), (bytearray(held.to_bytes()),))

    def held(self) -> HeldRecords:
        if not self._held.exists():
            return HeldRecords.empty()
        return HeldRecords.concat([HeldRecords.from_bytes(bytes(v[0])) for _k, v in self._held.iterator()])

    def replace_held(self, held: HeldRecords) -> None:
        self._held.clear()
        if len(held):
            self.append_held(held)

    def get_piece(self, name: str) -> bytes | None:
        value = self._pieces.getValue((name,))
        return None if value is None else bytes(value[0])

    def put_piece(self, name: str, blob: bytes) -> None:
        self._pieces.updateValue((name,), (bytearray(blob),))

    def remove_piece(self, name: str) -> None:
        self._pieces.removeKey((name,))


_INPUTS: dict[tuple[Any, tuple[str, ...]], tuple[float, tuple[str, ...]]] = {}


def current_inputs(kafka: KafkaConfig, topics: tuple[str, ...]) -> tuple[str, ...]:
    """Every partition of the input topics as the cluster has them now (cached per worker process
    for :data:`INPUTS_TTL_S`: far shorter than a router takes to notice a new partition)."""
    if not topics:
        return ()
    key = (kafka.connection, topics)
    cached = _INPUTS.get(key)
    if cached is not None and time.monotonic() - cached[0] < INPUTS_TTL_S:
        return cached[1]
    from ballast.kafka.admin import make_admin

    metadata = make_admin(kafka.with_client_id("ballast-reduce-inputs")).list_topics(timeout=10)
    found = tuple(
        partition_id(t, p)
        for t in topics
        if t in metadata.topics
        for p in sorted(metadata.topics[t].partitions)
    )
    _INPUTS[key] = (time.monotonic(), found)
    return found


class WorkerProcessor(StatefulProcessor):
    """One instance per task; the grouping key is a worker label."""

    def __init__(self, spec: JobSpec) -> None:
        self.spec = spec

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.buckets = handle.getMapState("buckets", "bucket LONG", "blob BINARY")
        self.meta = handle.getValueState("meta", "blob BINARY")
        self.held = handle.getMapState("held_blocks", "block LONG", "blob BINARY")
        self.pieces = handle.getMapState("pieces", "name STRING", "blob BINARY")
        self.processor = batch_processor(from_spec(self.spec.processor))
        self.worker_of = {label: w for w, label in enumerate(self.spec.labels)}
        self.log = shared_log(
            self.spec.kafka.with_client_id("ballast-reduce-control"),
            self.spec.topics["control"],
            self.spec.routed_partitions,
        )

    def handleInputRows(self, key, rows, timerValues) -> Iterator[pd.DataFrame]:
        frame = pd.concat(list(rows), ignore_index=True)
        yield self._step(int(key[0]), frame, timerValues)

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo) -> Iterator[pd.DataFrame]:
        expired = expiredTimerInfo.getExpiryTimeInMs()
        yield self._step(int(key[0]), None, timerValues, expired)

    def _step(
        self, label: int, frame: pd.DataFrame | None, timer_values, expired: int | None = None
    ) -> pd.DataFrame:
        from pyspark import TaskContext

        worker = self.worker_of[label]
        spec = self.spec
        stored = self.meta.get()
        meta = load_meta(bytes(stored[0]) if stored is not None else None)
        known = max(int(meta["known"]), int(meta.get("log_epoch", 0))) if meta else 0
        if frame is not None:
            valid = frame["kind"].to_numpy() != BAD  # data, markers, chunks and the log's end
            if valid.any():
                known = max(known, int(np.max(frame["epoch"].to_numpy()[valid])))
        # the view answers questions up to `known` only (the engine asks of the log's end as the
        # batch read it), so a view folded further by now changes no answer of a replay
        view = self.log.ensure(known, spec.control_timeout_s)
        config = WorkerConfig(
            worker,
            spec.input_partitions,
            spec.job,
            workers=spec.routed_partitions,
            chunk_bytes=spec.chunk_bytes,
            record_cost_s=spec.record_cost_us / 1e6,
            horizon_ms=spec.horizon_ms,
            max_future_ms=spec.max_future_ms,
        )
        store = _SparkStore(self.buckets, self.held, self.pieces)
        inputs = current_inputs(spec.kafka, spec.input_topics)
        step = WorkerStep(config, self.processor, view, store, meta, extra_inputs=inputs)
        watermark = max(int(timer_values.getCurrentWatermarkInMs()), 0)
        # the batch's own timestamp: the same when a batch is replayed, so a replay refuses the
        # same "future" records
        now = int(timer_values.getCurrentProcessingTimeInMs())
        result = step.run(frame, watermark, now)
        context = TaskContext.get()
        result.stats["spark_partition"] = context.partitionId() if context is not None else -1
        # one event-time timer per worker, at the earliest row it still has to look at; the meta
        # remembers it, so no JVM call is spent listing timers, and a fired one is not deleted again
        timer = result.meta.get("timer")
        if timer is not None and timer == expired:
            timer = None  # it fired: Spark removed it
        if timer is not None and timer != result.next_due:
            self.handle.deleteTimer(int(timer))
            timer = None
        if result.next_due is not None and timer is None and result.next_due > watermark:
            self.handle.registerTimer(int(result.next_due))
            timer = result.next_due
        result.meta["timer"] = timer
        self.meta.update((bytearray(dump_meta(result.meta)),))
        return OutputEncoder(spec.topics, worker, spec.job).frame(result, int(time.time() * 1000))

    def close(self) -> None:
        pass
