"""What a worker step takes and gives: the kinds of rows, its configuration, its outputs.

Why a module of its own: the Spark adapter (:mod:`spark_jobs.reduce.stateful`), the query
(:mod:`spark_jobs.reduce.job`), the output encoder and the tests all speak this contract, and none
of them needs the step's logic (:mod:`spark_jobs.reduce.engine`) to do so. The meta a step carries
from one batch to the next is :mod:`spark_jobs.reduce.worker_meta`'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from spark_jobs.processors.batch import Results
from spark_jobs.reduce.worker_meta import WorkerMeta

DATA, MARKER, CHUNK, CONTROL, BAD = 0, 1, 2, 3, -1
DONE_KEY = ""  # a state chunk with an empty key (never a record's key): "shipment done" for its epoch


@dataclass(frozen=True)
class WorkerConfig:
    """What one worker needs to know besides its rows: who it is and how it treats time."""

    worker: int
    input_partitions: tuple[str, ...]  # "topic:partition" of every input partition of the job
    job: str = ""  # the job id its chunks carry; chunks of other jobs on the same topic are skipped
    workers: int = 1  # routed partitions: everyone a rehash "shipment done" goes to
    chunk_bytes: int = 512 * 1024
    heavy_keys: int = 5
    record_cost_s: float = 0.0  # simulated work per record, paid where the key's state lives (benchmarks)
    record_cost_kind: str = "sleep"  # that work as a sleep (blocking I/O) or as CPU (record_cost.pay)
    horizon_ms: int = 0  # emitted windows are kept this long past their end for corrections
    watermark_delay_ms: int = 0  # the watermark trails the slowest input partition's progress by this
    idle_timeout_ms: int = 0  # a partition silent this long (routed-log time) is left out (0: never)
    # a legacy router's record further ahead of its routed timestamp is refused (0: no bound); the
    # routers of this version refuse such records themselves (``future`` dead letters)
    max_future_ms: int = 0


@dataclass(frozen=True)
class DeadLetter:
    offset: int
    raw: bytes | None
    reason: str
    detail: str


@dataclass(frozen=True)
class ChunkOut:
    key: str
    epoch: int
    from_worker: int
    to_worker: int
    chunk_index: int
    chunk_count: int
    state: bytes


@dataclass
class StepResult:
    results: Results = field(default_factory=Results.empty)
    chunks: list[ChunkOut] = field(default_factory=list)
    dead: list[DeadLetter] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)
    next_due: int | None = None
    meta: WorkerMeta = field(default_factory=WorkerMeta)


def listed(value: Any) -> list[Any]:
    """An array column's value as a list (None, NaN or absent: empty)."""
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return []
    return list(value)


def piece_name(key: str, run: int, count: int, index: int) -> str:
    return f"{run}\x00{count}\x00{index}\x00{key}"

