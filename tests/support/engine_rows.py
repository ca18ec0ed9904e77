"""Rows as a reduce worker receives them (one routed partition, decoded), for the engine's tests.

Why a module: the rule tests, the simulated cluster and the defect tests all build data records,
markers and state chunks the way the Spark job hands them to a worker, and must agree on the
columns.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pandas as pd

from ballast.control.state import make_event
from spark_jobs.reduce.contract import CHUNK, CONTROL, DATA, MARKER
from spark_jobs.reduce.ownership import OwnershipView

if TYPE_CHECKING:
    from spark_jobs.reduce.worker_meta import WorkerMeta

N = 4  # routed partitions (workers)
PARTITIONS = ("in:0", "in:1")  # input partitions
COLUMNS = [
    "offset",
    "timestamp",
    "kind",
    "key",
    "value",
    "source_topic",
    "source_partition",
    "legacy",
    "event_time",
    "epoch",
    "covers",
    "cover_times",
    "shed",
    "marker_worker",
    "chunk_from",
    "chunk_to",
    "chunk_index",
    "chunk_count",
    "chunk_state",
    "chunk_job",
    "raw",
    "error",
]


def row(**kw: Any) -> dict[str, Any]:
    base = dict.fromkeys(COLUMNS)
    base.update(timestamp=0, value=0.0, event_time=0, raw=None, chunk_job="", legacy=False)
    base.update(kw)
    return base


def data(key: str, value: float, t: int, epoch: int, topic: str | None = None) -> dict[str, Any]:
    """A data record routed under ``epoch``; ``topic``: its input topic (None: the envelope names
    none, so the job's only input topic)."""
    return row(kind=DATA, key=key, value=value, event_time=t, epoch=epoch, source_topic=topic)


def marker(
    epoch: int,
    worker: int,
    *parts: str,
    times: dict[str, int] | None = None,
    shed: list[tuple[str, int, int, float]] = (),
    timestamp: int = 0,
) -> dict[str, Any]:
    """A marker covering ``parts`` (all input partitions by default); ``times``: the event-time
    progress it announces per partition (-1: none); ``shed``: (topic, first, last, keep) spans."""
    covers = list(parts or PARTITIONS)
    return row(
        kind=MARKER,
        epoch=epoch,
        covers=covers,
        cover_times=[(times or {}).get(p, -1) for p in covers],
        shed=[{"topic": t, "first": a, "last": b, "keep": k} for t, a, b, k in shed],
        marker_worker=worker,
        timestamp=timestamp,
    )


def chunk_row(c, job: str = "") -> dict[str, Any]:
    """The row a state chunk (a step's ``ChunkOut``) becomes when its receiver reads it."""
    return row(
        kind=CHUNK,
        key=c.key,
        epoch=c.epoch,
        chunk_from=c.from_worker,
        chunk_to=c.to_worker,
        chunk_index=c.chunk_index,
        chunk_count=c.chunk_count,
        chunk_state=c.state,
        chunk_job=job,
    )


def control(epoch: int) -> dict[str, Any]:
    """The control log's end as a micro-batch read it (the job's second source), offset -1."""
    return row(kind=CONTROL, epoch=epoch, offset=-1)


def genesis(workers: int = N) -> dict[str, Any]:
    return make_event(
        0,
        "TABLE_SNAPSHOT",
        {"num_workers": workers, "table": {}, "keep_probability": {}, "routed_partitions": workers},
    )


class Worker:
    """One worker's store, meta and next offset, stepped over hand-written rows (no Spark)."""

    def __init__(
        self, w: int, view, processor, partitions: tuple[str, ...] = PARTITIONS, **config: Any
    ) -> None:
        from spark_jobs.processors.batch import batch_processor
        from spark_jobs.reduce.store import DictStore

        self.w, self.view, self.store, self.meta, self.offset = w, view, DictStore(), None, 0
        self.processor = batch_processor(processor)
        self.partitions = partitions
        self.config = {"workers": N, "horizon_ms": 1000, **config}

    def step(
        self,
        rows: list[dict[str, Any]],
        watermark: int | None = 0,
        now: int = 0,
        *,
        log: bool = True,
        **extra: Any,
    ):
        """One micro-batch of ``rows``; with ``log`` it also carries the control log's end as the
        view has it (as the job's control source delivers it to every batch).

        ``watermark``: the worker's event time during the batch, as if markers had announced that
        much progress on every input partition before it (the rules these tests check do not
        depend on how the watermark got there; tests of the watermark itself pass None and
        announce progress in markers)."""
        from spark_jobs.reduce.contract import WorkerConfig
        from spark_jobs.reduce.engine import WorkerStep

        for r in rows:
            r["offset"] = self.offset
            self.offset += 1
        if log:
            rows = [*rows, control(self.view.epoch)]
        frame = pd.DataFrame(rows, columns=COLUMNS) if rows else None
        config = WorkerConfig(self.w, self.partitions, **self.config)
        if watermark is not None:
            self.meta = with_watermark(self.meta, watermark)
        result = WorkerStep(config, self.processor, self.view, self.store, self.meta, **extra).run(frame, now)
        self.meta = result.meta
        return result


def with_watermark(meta: WorkerMeta | None, watermark: int) -> WorkerMeta:
    """``meta`` (None: a new worker's) with its event time set to ``watermark``."""
    from spark_jobs.reduce.worker_meta import WorkerMeta

    meta = meta if meta is not None else WorkerMeta()
    meta.watermark = int(watermark)
    return meta


def shedding(epoch: int, target: str, keep: float) -> dict[str, Any]:
    """A ``SHEDDING`` event: keep each record of ``target`` (an input topic or ``*``) with ``keep``."""
    return make_event(epoch, "SHEDDING", {"target": target, "keep_probability": keep, "reason": "test"})


def view_with(*pins: dict[str, int]) -> OwnershipView:
    """The ownership view of a log: the genesis, then one routing update per ``pins``."""
    view = OwnershipView(N)
    view.apply(genesis())
    for epoch, p in enumerate(pins, start=1):
        view.apply(make_event(epoch, "ROUTING_UPDATE", {"assign": p, "unassign": [], "reason": ""}))
    return view


def emitted(result) -> list[tuple[str, int, int, float]]:
    """(key, window start, count, sum) of every row a step emitted."""
    return [(r.key, r.window_start, r.count, r.sum) for r in result.results.rows()]
