"""The Spark side of a worker: a ``transformWithStateInPandas`` processor around :class:`WorkerStep`.

Why this is thin: everything that decides something lives in :mod:`spark_jobs.reduce.engine`,
which tests without Spark. Here only the grouping key becomes a worker number, the worker's bins
and meta go in and out of Spark's state store (RocksDB, checkpointed with the offsets, so a
restart resumes both together), the control log is followed far enough for the epochs the rows
carry, and the event-time timer is kept at the earliest window a worker still has to emit.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import pandas as pd
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle

from ballast.kafka.configuration import KafkaConfig
from spark_jobs.processors.spec import from_spec
from spark_jobs.reduce.engine import BAD, WorkerConfig, WorkerStep, dump_meta, load_meta
from spark_jobs.reduce.outputs import OutputEncoder
from spark_jobs.reduce.ownership import shared_log


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
    bins: int = 64
    chunk_bytes: int = 512 * 1024
    control_timeout_s: float = 60.0
    record_cost_us: float = 0.0


class _MapStateBins:
    """:class:`~spark_jobs.reduce.engine.BinStore` over one map-state variable (bin -> blob)."""

    def __init__(self, state) -> None:
        self.state = state

    def get(self, bin_id: int) -> bytes | None:
        value = self.state.getValue((bin_id,))
        return None if value is None else bytes(value[0])

    def put(self, bin_id: int, blob: bytes) -> None:
        self.state.updateValue((bin_id,), (bytearray(blob),))

    def remove(self, bin_id: int) -> None:
        self.state.removeKey((bin_id,))


class WorkerProcessor(StatefulProcessor):
    """One instance per task; the grouping key is a worker label."""

    def __init__(self, spec: JobSpec) -> None:
        self.spec = spec

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.bins = handle.getMapState("bins", "bin INT", "blob BINARY")
        self.meta = handle.getValueState("meta", "blob BINARY")
        self.processor = from_spec(self.spec.processor)
        self.worker_of = {label: w for w, label in enumerate(self.spec.labels)}
        self.log = shared_log(
            self.spec.kafka.with_client_id("ballast-reduce-control"),
            self.spec.topics["control"],
            self.spec.routed_partitions,
        )

    def handleInputRows(self, key, rows, timerValues) -> Iterator[pd.DataFrame]:
        frame = pd.concat(list(rows), ignore_index=True)
        yield self._step(int(key[0]), frame, timerValues.getCurrentWatermarkInMs())

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo) -> Iterator[pd.DataFrame]:
        expired = expiredTimerInfo.getExpiryTimeInMs()
        yield self._step(int(key[0]), None, timerValues.getCurrentWatermarkInMs(), expired)

    def _step(
        self, label: int, frame: pd.DataFrame | None, watermark_ms: int, expired: int | None = None
    ) -> pd.DataFrame:
        from pyspark import TaskContext

        worker = self.worker_of[label]
        stored = self.meta.get()
        meta = load_meta(bytes(stored[0]) if stored is not None else None)
        known = int(meta["known"]) if meta else 0
        if frame is not None:
            valid = frame["kind"].to_numpy() != BAD
            if valid.any():
                known = max(known, int(frame["epoch"].to_numpy()[valid].max()))
        view = self.log.ensure(known, self.spec.control_timeout_s)
        config = WorkerConfig(
            worker,
            self.spec.input_partitions,
            self.spec.job,
            self.spec.bins,
            self.spec.chunk_bytes,
            record_cost_s=self.spec.record_cost_us / 1e6,
        )
        step = WorkerStep(config, self.processor, view, _MapStateBins(self.bins), meta)
        result = step.run(frame, max(int(watermark_ms), 0))
        context = TaskContext.get()
        result.stats["spark_partition"] = context.partitionId() if context is not None else -1
        # one event-time timer per worker, at the earliest window it still has to emit; the meta
        # remembers it, so no JVM call is spent listing timers, and a fired one is not deleted again
        timer = result.meta.get("timer")
        if timer is not None and timer == expired:
            timer = None  # it fired: Spark removed it
        if timer is not None and timer != result.next_due:
            self.handle.deleteTimer(int(timer))
            timer = None
        if result.next_due is not None and timer is None:
            self.handle.registerTimer(int(result.next_due))
        result.meta["timer"] = result.next_due
        self.meta.update((bytearray(dump_meta(result.meta)),))
        return OutputEncoder(self.spec.topics, worker, self.spec.job).frame(result, int(time.time() * 1000))

    def close(self) -> None:
        pass
