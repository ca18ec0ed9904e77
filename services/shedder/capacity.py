"""The reduce's capacity from its own batches' rows and busy time (pure; no Kafka, no clock).

Why not the processing rate. A reduce that keeps up processes exactly what it is given, so its
records per second say how much load there is, not how much it could take. The shedder used to
take the processing rate as the capacity while the pipeline looked saturated (a lag over the lift
threshold, or rising two cycles). On a micro-batch reduce the lag is a saw-tooth of a batch or two
even when it keeps up, and a benchmark read 229/s as the capacity of a reduce measured at 1,226/s:
the shedding, once in force, was never lifted.

What DS2 (Kalavri et al., OSDI 2018) calls the *true processing rate* does not depend on the load:
records processed per second of *useful* time. Every ``ReduceProgress`` says how many rows its
batch read (``input_rows``) and how long the batch took (``durations_ms["triggerExecution"]``).
DS2 assumes the useful time grows with the records; a Spark micro-batch does not: each batch pays
a fixed cost (planning, offsets, the state store's commit; about 0.9 s of a 2 s trigger in the
shedding benchmark) before its rows' cost. So rows / busy seconds under-reads at small batches (it
read 590/s at 1,000-row batches of a reduce that drains a backlog at 1,330/s), and a lift planned
from it climbs a factor of about 1.5 per cycle instead of lifting in one or two. Hence a model:

    busy(n) = fixed_s + per_row_s * n       (fitted over the batches of the last window_s)
    capacity = rate_at(reference_s) = (reference_s - fixed_s) / (per_row_s * reference_s)

the records per second of batches that take ``reference_s`` each: what the reduce sustains while
its lag stays about two such batches. The default reference is the policy's cycle (5 s).

* **The fit needs spread.** Batches of nearly one size say nothing of the split between fixed and
  per-row cost: the fit is used only when the largest batch has at least ``min_spread`` times the
  rows of the smallest, with a positive per-row cost. Otherwise the last good fit is kept (the
  cost of a record does not change with the load), and with none, the plain ratio.
* **Never below what was seen.** The capacity is at least ``sum(rows) / sum(busy)`` of the window:
  the reduce did process that fast, so a fit that says less is wrong.
* **Start-up and stalls are left out.** A query's first batch pays for code generation and the
  state store's first open (5 rows in 8.4 s in the benchmark), a garbage collection stalls one
  batch now and then: with at least ``MIN_BATCHES`` batches in the window, a batch busy more than
  ``OUTLIER_FACTOR`` times their median is left out of both the fit and the ratio. Below
  ``MIN_BATCHES`` there is no capacity (no decision) unless a fit was made before. Why: the start-up
  batch alone made the ratio 52/s for a reduce that drains 1,580/s, and the shedder said
  CANNOT_HOLD and shed half of a calm input before the benchmark's overload began.
* **Empty batches** (no rows; Spark runs them to advance the watermark) are left out: they cost
  time but say nothing of the cost of records. **A replayed batch** (the same ``batch_id`` again,
  after a restart) replaces the first report. **Several jobs** read the same routed records: the
  pipeline's capacity is the smallest.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass

BUSY_KEY = "triggerExecution"  # Spark's whole-batch duration in a query's progress
MAX_BATCHES = 512  # per job: a bound whatever the trigger (60 s of 0.1 s batches is 600)
MIN_BATCHES = 3  # batches with rows before a capacity is said at all (and outliers can be told)
OUTLIER_FACTOR = 2.5  # a batch busy this many times the window's median is a start-up or a stall


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


def usable(history: Iterable[BatchCost], now: float, window_s: float) -> list[BatchCost]:
    """The batches with rows reported in the last ``window_s``, without start-ups and stalls (busy
    more than ``OUTLIER_FACTOR`` times the median) once there are ``MIN_BATCHES`` to tell them by."""
    recent = [b for b in history if b.rows > 0 and now - b.at <= window_s]
    if len(recent) < MIN_BATCHES:
        return recent
    typical = statistics.median(b.busy_s for b in recent)
    return [b for b in recent if b.busy_s <= OUTLIER_FACTOR * typical]


def busy_rate(history: Iterable[BatchCost], now: float, window_s: float) -> float | None:
    """Rows per busy second over the :func:`usable` batches of the last ``window_s``; None when
    there are none (a job not measured yet: no decision should be made from it)."""
    batches = usable(history, now, window_s)
    busy = sum(b.busy_s for b in batches)
    return sum(b.rows for b in batches) / busy if busy > 0 else None


@dataclass(frozen=True)
class CostModel:
    """A batch's busy seconds as ``fixed_s + per_row_s * rows`` (module docstring)."""

    fixed_s: float
    per_row_s: float

    def rate_at(self, batch_s: float) -> float:
        """Rows per second of batches that each take ``batch_s`` seconds."""
        return max(batch_s - self.fixed_s, 0.0) / (self.per_row_s * batch_s)


def fit_cost(
    history: Iterable[BatchCost], now: float, window_s: float, min_spread: float = 1.5
) -> CostModel | None:
    """The cost model of the :func:`usable` batches of the last ``window_s``, by Theil-Sen: the per-row
    cost is the median slope over pairs of batches, the fixed cost the median of what each batch
    leaves for it. Why not least squares: one stalled batch (a garbage collection, a noisy
    neighbour, the first batch's 9 s of start-up in the benchmark) moves a least-squares slope as
    far as it likes; a median ignores up to ~29% of outliers. None when fewer than 3 batches,
    their sizes spread less than ``min_spread``, or the per-row cost is not positive; the fixed
    cost is clipped to [0, the shortest batch]."""
    points = [(float(b.rows), b.busy_s) for b in usable(history, now, window_s)]
    if len(points) < 3:
        return None
    rows = [n for n, _ in points]
    if max(rows) < min_spread * min(rows):
        return None
    slopes = [
        (d2 - d1) / (n2 - n1)
        for i, (n1, d1) in enumerate(points)
        for n2, d2 in points[i + 1 :]
        if abs(n2 - n1) >= 0.1 * max(n1, n2)  # batches of nearly one size: their slope is noise
    ]
    if not slopes:
        return None
    per_row = statistics.median(slopes)
    if per_row <= 0:
        return None
    fixed = statistics.median(d - per_row * n for n, d in points)
    return CostModel(min(max(fixed, 0.0), min(d for _, d in points)), per_row)


def job_capacity(
    history: Iterable[BatchCost], now: float, window_s: float, batch_s: float, model: CostModel | None
) -> tuple[float | None, CostModel | None]:
    """(one job's capacity, the cost model to remember): the fit of the window, else ``model`` (the
    last good fit), at ``batch_s``; never below the window's rows per busy second. With fewer than
    ``MIN_BATCHES`` usable batches in the window (starting, or idle), the last good fit's rate,
    else None."""
    batches = tuple(history)
    seen = busy_rate(batches, now, window_s)
    if seen is None or len(usable(batches, now, window_s)) < MIN_BATCHES:
        # starting or idle: the last good fit still says what a record costs; without one, nothing.
        # A fit whose fixed cost exceeds ``batch_s`` rates 0 there (the target cannot be met): then
        # what was seen, if anything, never 0 (the policy takes no capacity of 0: it would stop)
        if model is None:
            return None, model
        rate = max(model.rate_at(batch_s), seen or 0.0)
        return (rate if rate > 0 else None), model
    model = fit_cost(batches, now, window_s) or model
    return (seen if model is None else max(seen, model.rate_at(batch_s))), model


def pipeline_capacity(rates: Iterable[float | None]) -> float | None:
    """The smallest job's busy rate; None if any job's is not measured, or not above 0 (or there is
    no job)."""
    values = list(rates)
    if not values or any(r is None or not math.isfinite(r) or r <= 0 for r in values):
        return None
    return min(v for v in values if v is not None)
