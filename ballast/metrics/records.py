"""Typed bodies of the ``MetricsRecord`` union (``ballast/schemas/metrics.avsc``), one dataclass per branch.

Why types and not the decoded dicts: every reader used to pick the same fields out of nested
dicts by their string names (``rec["body"][1]["worker_records"]``), each with its own idea of
which branch it had. Here a record is decoded once into :class:`Metric` with a body whose class
says what it is (``RouterKeyStats``, ``WorkerStats``, ``ReduceProgress``, ``LagSample``) and whose
attributes are the schema's fields. Fields a newer writer adds are ignored by
:func:`body_of` until a field is declared here, so an older reader keeps working.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

NAMESPACE = "io.ballast."

T = TypeVar("T")


def _build(cls: type[T], raw: Mapping[str, Any]) -> T:
    """``cls`` from the fields of ``raw`` it declares (schema defaults fill what older writers lack)."""
    return cls(**{f.name: raw[f.name] for f in fields(cls) if f.name in raw})  # type: ignore[call-arg]


@dataclass(frozen=True)
class HeavyHitter:
    key: str
    count: int  # sketch estimate, never below the true count
    error: int  # true count >= count - error


@dataclass(frozen=True)
class RouterKeyStats:
    """One router's statistics interval: records per worker and its heavy hitters."""

    epoch: int
    worker_records: list[int]
    worker_bytes: list[int]
    offered_records: int
    kept_records: int
    heavy_hitters: list[HeavyHitter]
    sketch_capacity: int
    first_epoch: int = 0
    dead_lettered: int = 0
    sketch_records: int = 0
    useful_ms: int | None = None  # DS2's useful time (None: a router from before it was measured)

    @classmethod
    def of(cls, raw: Mapping[str, Any]) -> RouterKeyStats:
        body = dict(raw)
        body["heavy_hitters"] = [_build(HeavyHitter, h) for h in raw["heavy_hitters"]]
        return _build(cls, body)


@dataclass(frozen=True)
class ChunkMove:
    key: str
    epoch: int
    worker: int  # the other side: receiver of a sent chunk, sender of an installed one
    bytes: int


@dataclass(frozen=True)
class KeyStateSize:
    key: str
    bytes: int


@dataclass(frozen=True)
class WorkerStats:
    """One reduce worker's step (a micro-batch with rows, or a timer firing)."""

    worker: int
    epoch: int
    records: int
    busy_ms: float
    state_bytes: int
    state_keys: int
    frontier_epoch: int = -1
    watermark_ms: int = 0
    step: int = 0
    spark_partition: int = -1
    late_records: int = 0
    held_records: int = 0
    pending_keys: int = 0
    duplicate_chunks: int = 0
    heavy_state: list[KeyStateSize] = field(default_factory=list)
    chunks_sent: list[ChunkMove] = field(default_factory=list)
    chunks_installed: list[ChunkMove] = field(default_factory=list)
    flow_latency_p50_ms: float = 0.0
    flow_latency_p99_ms: float = 0.0
    excluded_records: int = 0
    refused_records: int = 0
    violations: int = 0
    corrections: int = 0
    state_buckets: int = 0
    control_records_skipped: int = 0

    @classmethod
    def of(cls, raw: Mapping[str, Any]) -> WorkerStats:
        body = dict(raw)
        body["heavy_state"] = [_build(KeyStateSize, x) for x in raw.get("heavy_state", ())]
        for name in ("chunks_sent", "chunks_installed"):
            body[name] = [_build(ChunkMove, x) for x in raw.get(name, ())]
        return _build(cls, body)


@dataclass(frozen=True)
class LagSample:
    """One group's (or reduce job's) lag on one partition, as the shedder measured it."""

    group: str
    topic: str
    partition: int
    committed_offset: int
    end_offset: int
    lag_records: int
    lag_seconds: float  # the age of the oldest record not yet processed (NaN: not known)
    stage: str = ""  # "router" (a group's committed offsets) or "reduce" (a job's ReduceProgress)
    status: str = ""  # the partition's Burrow-style status: OK, WARN, STALL, STOP, ERR
    group_status: str = ""  # the group's: its worst partition's
    arrival_rate: float = 0.0  # records/s appended to the partition
    service_rate: float = 0.0  # records/s the group consumed from it

    @classmethod
    def of(cls, raw: Mapping[str, Any]) -> LagSample:
        return _build(cls, raw)


@dataclass(frozen=True)
class ReduceProgress:
    """One micro-batch of a reduce job, as its driver saw it (Spark's query progress)."""

    job: str
    batch_id: int
    input_rows: int
    durations_ms: dict[str, int]
    end_offsets: list[int]  # per routed partition, exclusive; -1: not known
    watermark_ms: int = 0
    processed_rows_per_s: float = 0.0
    # per routed partition, the log end Spark saw when planning the batch; []: an older writer
    latest_offsets: list[int] = field(default_factory=list)

    @classmethod
    def of(cls, raw: Mapping[str, Any]) -> ReduceProgress:
        return _build(cls, raw)

    def covers(self, ends: Mapping[int, int]) -> bool:
        """The batch read every partition at least up to ``ends`` (partition -> offset)."""
        return all(
            end <= 0 or (p < len(self.end_offsets) and self.end_offsets[p] >= end) for p, end in ends.items()
        )


@dataclass(frozen=True)
class ControllerStatus:
    """The controller's state every few seconds (the standby's heartbeat, the demo's view)."""

    controller: str
    epoch: int
    table_size: int
    workers: int
    realized_imbalance: float
    predicted_imbalance: float = 0.0
    worker_load: list[float] = field(default_factory=list)
    migration_id: str = ""
    migration_keys: int = 0
    migration_bytes: int = 0
    requests_accepted: int = 0
    requests_refused: dict[str, int] = field(default_factory=dict)
    decisions: int = 0
    last_decision: str = ""
    control_records_skipped: dict[str, int] = field(default_factory=dict)
    scaling: ScalingStatus | None = None

    @classmethod
    def of(cls, raw: Mapping[str, Any]) -> ControllerStatus:
        body = dict(raw)
        scaling = body.get("scaling")
        if scaling is not None:  # a union branch: the codec's (name, fields) tuple
            body["scaling"] = _build(ScalingStatus, scaling[1] if isinstance(scaling, tuple) else scaling)
        return _build(cls, body)


@dataclass(frozen=True)
class ScalingStatus:
    """The controller's scaling loop as of its last evaluation (docs/scaling.md)."""

    mode: str
    instances: dict[str, int]
    optimal: dict[str, int] = field(default_factory=dict)
    true_rates: dict[str, float] = field(default_factory=dict)
    last_decision: str = ""


Body = RouterKeyStats | WorkerStats | LagSample | ReduceProgress | ControllerStatus
BODIES: dict[str, Any] = {
    NAMESPACE + "RouterKeyStats": RouterKeyStats,
    NAMESPACE + "WorkerStats": WorkerStats,
    NAMESPACE + "LagSample": LagSample,
    NAMESPACE + "ReduceProgress": ReduceProgress,
    NAMESPACE + "ControllerStatus": ControllerStatus,
}


@dataclass(frozen=True)
class Metric:
    """One record of the metrics topic: who published it, for which interval, and its typed body."""

    source: str
    interval_start: int  # ms
    interval_end: int  # ms
    body: Body


def body_of(branch: str, raw: Mapping[str, Any]) -> Body:
    """The typed body of a decoded union branch (``branch`` is its full name)."""
    try:
        cls = BODIES[branch]
    except KeyError:
        raise ValueError(f"unknown metrics body {branch}") from None
    return cls.of(raw)


def metric_of(record: Mapping[str, Any]) -> Metric:
    """A decoded ``MetricsRecord`` (the codec's dict, its body a (branch, fields) pair), typed."""
    branch, raw = record["body"]
    return Metric(
        record["source"], int(record["interval_start"]), int(record["interval_end"]), body_of(branch, raw)
    )


def metrics_record(
    source: str, start_ms: int, end_ms: int, branch: str, body: Mapping[str, Any]
) -> dict[str, Any]:
    """The codec's dict of a ``MetricsRecord`` to encode (``branch``: e.g. ``"ReduceProgress"``)."""
    return {
        "source": source,
        "interval_start": int(start_ms),
        "interval_end": int(end_ms),
        "body": (NAMESPACE + branch, dict(body)),
    }
