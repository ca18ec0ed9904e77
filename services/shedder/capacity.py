"""The reduce's capacity from its own batches: rows over busy seconds (pure; no Kafka, no clock).

Why not the processing rate. A reduce that keeps up processes exactly what it is given, so its
records per second say how much load there is, not how much it could take. The shedder used to
take the processing rate as the capacity while the pipeline looked saturated (a lag over the lift
threshold, or rising two cycles). On a micro-batch reduce the lag is a saw-tooth of a batch or two
even when it keeps up, and a benchmark read 229/s as the capacity of a reduce measured at 1,226/s:
the shedding, once in force, was never lifted.

What DS2 (Kalavri et al., OSDI 2018) calls the *true processing rate* does not depend on the load:
records processed per second of *useful* time. Every ``ReduceProgress`` says how many rows its
batch read (``input_rows``) and how long the batch took (``durations_ms["triggerExecution"]``), so
over the batches of the last ``window_s``:

    capacity = sum(rows) / sum(busy seconds)

* It is a **lower bound**, tight when the reduce is saturated (batches back to back, overhead
  shared by many rows). At low load each batch's fixed cost (planning, the state store's commit)
  weighs on few rows and the figure under-reads: kept load / capacity is then the reduce's busy
  fraction. The policy's decisions stay right: the load exceeds this capacity only when the reduce
  is busy more than the wall clock allows, and a lift's budget is above the kept load whenever the
  busy fraction is under ``1 - headroom``, so lifts climb as the overhead is amortised over more rows.
* **Empty batches** (no rows; Spark runs them to advance the watermark) are left out: they cost
  time but say nothing of the cost of records.
* **A replayed batch** (the same ``batch_id`` again, after a restart) replaces the first report.
* **Several jobs** read the same routed records: the pipeline's capacity is the smallest.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

BUSY_KEY = "triggerExecution"  # Spark's whole-batch duration in a query's progress
MAX_BATCHES = 512  # per job: a bound whatever the trigger (60 s of 0.1 s batches is 600)


@dataclass(frozen=True)
class BatchCost:
    """One batch: its id, rows read, seconds it took, and when (monotonic seconds) it was reported."""

    batch_id: int
    rows: int
    busy_s: float
    at: float


def batch_cost(batch_id: int, rows: int, durations_ms: dict[str, int], at: float) -> BatchCost | None:
    """The cost of one reported batch; None when it reports no duration (nothing to learn from)."""
    busy_ms = durations_ms.get(BUSY_KEY, 0)
    if busy_ms <= 0 or rows < 0:
        return None
    return BatchCost(batch_id, rows, busy_ms / 1000.0, at)


def with_batch(history: tuple[BatchCost, ...], batch: BatchCost, window_s: float) -> tuple[BatchCost, ...]:
    """``history`` with ``batch`` (replacing a report of the same batch id) and without batches
    reported more than ``window_s`` before it. A new tuple: the caller replaces its copy whole."""
    kept = [b for b in history if b.batch_id != batch.batch_id and batch.at - b.at <= window_s]
    kept.append(batch)
    return tuple(kept[-MAX_BATCHES:])


def busy_rate(history: Iterable[BatchCost], now: float, window_s: float) -> float | None:
    """Rows per busy second over the batches with rows reported in the last ``window_s``; None
    when there are none (a job not measured yet: no decision should be made from it)."""
    rows, busy = 0, 0.0
    for b in history:
        if b.rows > 0 and now - b.at <= window_s:
            rows += b.rows
            busy += b.busy_s
    return rows / busy if busy > 0 else None


def pipeline_capacity(rates: Iterable[float | None]) -> float | None:
    """The smallest job's busy rate; None if any job's is not measured (or there is no job)."""
    values = list(rates)
    if not values or any(r is None or not math.isfinite(r) for r in values):
        return None
    return min(v for v in values if v is not None)
