"""From what the services publish on the metrics topic to the stages DS2's pass takes.

* **Routers**: each ``RouterKeyStats`` interval carries records offered and kept and the router's
  useful milliseconds; a router's window over an evaluation is the sum of its intervals. An
  interval from a router that did not measure useful time (an older release) is left out rather
  than read as "all useful" (that would understate its rate and ask for routers it does not need).
* **The reduce**: its ``ReduceProgress`` batches fit the micro-batch model
  (:mod:`services.controller.scaling.batch_model`); the rate per worker is the model's at the
  trigger. A batch's workers are the parallel ones: the hashed workers, at most the cores that
  run them (8 workers on 2 cores share 2 cores' time).
* **Targets**: the shedder's ``LagSample`` of the routers' group gives the input's arrival rate
  and backlog (the source's target, with a catch-up term); its samples of the reduce give the
  routed topic's backlog, which the reduce must work off on top of what the routers push.
* **Busy time** (the rule DS2 is compared with, :mod:`services.controller.scaling.busy_time`):
  each stage's records in per second over the evaluation and its busiest instance's busy
  fraction, a router's being its useful time over its span, a reduce worker's its steps'
  ``busy_ms`` over the evaluation.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from ballast.metrics.records import LagSample, ReduceProgress, RouterKeyStats, WorkerStats
from services.controller.scaling.batch_model import BatchSample, fit
from services.controller.scaling.busy_time import StageLoad
from services.controller.scaling.ds2 import InstanceWindow, ModelledRate

ROUTER_STAGE = "router"
REDUCE_STAGE = "reduce"


@dataclass(frozen=True)
class RouterReport:
    """One ``RouterKeyStats`` interval with its envelope: who sent it and the span it covers."""

    source: str
    start_ms: int
    end_ms: int
    stats: RouterKeyStats


def router_windows(reports: Sequence[RouterReport]) -> tuple[InstanceWindow, ...]:
    """One window per router (sorted by name): its intervals' records and useful time summed."""
    pulled: dict[str, int] = defaultdict(int)
    pushed: dict[str, int] = defaultdict(int)
    useful_ms: dict[str, int] = defaultdict(int)
    span_ms: dict[str, int] = defaultdict(int)
    for r in reports:
        if r.stats.useful_ms is None or r.end_ms <= r.start_ms:
            continue
        pulled[r.source] += r.stats.offered_records
        # what it would push with nothing shed: DS2 carries the demand on, not what shedding lets
        # through (else the reduce is sized for the shed stream and shedding never lifts)
        pushed[r.source] += max(r.stats.offered_records - r.stats.dead_lettered, r.stats.kept_records)
        useful_ms[r.source] += r.stats.useful_ms
        span_ms[r.source] += r.end_ms - r.start_ms
    return tuple(
        # a clock step can make useful time exceed the interval by a little: bound it, not refuse
        InstanceWindow(pulled[s], pushed[s], min(useful_ms[s], span_ms[s]) / 1000, span_ms[s] / 1000)
        for s in sorted(span_ms)
    )


def parallel_workers(hashed_workers: int, cores: int | None) -> int:
    return max(1, hashed_workers if cores is None else min(hashed_workers, cores))


def reduce_rate(
    batches: Sequence[tuple[ReduceProgress, int]],
    current_workers: int,
    trigger_s: float,
    cores: int | None = None,
    min_batches: int = 5,
) -> ModelledRate:
    """The reduce's rate per *parallel* worker from its recent ``batches`` (each with the hashed
    workers it ran with). The reduce's instances, for DS2, are parallel workers: a hashed worker
    with a core to run on; the actuator changes both (``SCALE`` and the cores), and where the
    cores are fixed they cap the stage (:func:`parallel_workers`). Batches without rows are left
    out: their duration is the fixed cost alone, and idle batches would fit no per-row cost."""
    samples = [
        BatchSample(p.input_rows, parallel_workers(w, cores), p.durations_ms["triggerExecution"] / 1000)
        for p, w in batches
        if p.input_rows > 0 and "triggerExecution" in p.durations_ms
    ]
    model = fit(samples, min_samples=min_batches)
    parallel = parallel_workers(current_workers, cores)
    if model is None:
        why = f"{len(samples)} batches with rows do not fit the batch model yet (too few, or all of one size)"
        return ModelledRate(parallel, None, why=why)
    per_parallel = model.rate_per_worker(trigger_s)
    if per_parallel is None:
        why = (f"the fixed cost per batch ({model.fixed_s:.2f} s) fills the trigger ({trigger_s:.2f} s): "
               "more workers cannot keep up")  # fmt: skip
        return ModelledRate(parallel, None, why=why)
    why = (f"batch model over {model.samples} batches: fixed {model.fixed_s:.2f} s, "
           f"{model.cost_per_row_s * 1e6:.1f} µs/row, r² {model.r2:.2f}")  # fmt: skip
    return ModelledRate(parallel, per_parallel, 1.0, why)


@dataclass(frozen=True)
class Targets:
    """What the input asks of the pipeline, from the shedder's lag samples."""

    arrival_rate: float  # records/s appended to the input topics
    input_backlog: float  # records not yet routed
    routed_backlog: float  # records routed, not yet reduced


def targets(samples: Sequence[LagSample]) -> Targets:
    """The latest sample per (stage, topic, partition) summed: the routers' samples give the
    input's arrival and backlog, the reduce's the routed backlog."""
    latest: dict[tuple[str, str, int], LagSample] = {}
    for s in samples:
        latest[(s.stage, s.topic, s.partition)] = s
    router = [s for (stage, _t, _p), s in latest.items() if stage == ROUTER_STAGE]
    reduce = [s for (stage, _t, _p), s in latest.items() if stage == REDUCE_STAGE]
    arrival = sum(s.arrival_rate for s in router)
    input_backlog = sum(max(s.lag_records, 0) for s in router)
    routed_backlog = sum(max(s.lag_records, 0) for s in reduce)
    return Targets(float(arrival), float(input_backlog), float(routed_backlog))


def router_load(windows: Sequence[InstanceWindow], routers: int) -> StageLoad:
    """The router stage as the busy-time rule sees it: records in and out per second summed over
    the routers, and the busiest router's useful fraction of its span."""
    rate_in = sum(w.pulled / w.window_s for w in windows)
    rate_out = sum(w.pushed / w.window_s for w in windows)
    busy = max((w.useful_s / w.window_s for w in windows), default=0.0)
    return StageLoad(ROUTER_STAGE, routers, rate_in, rate_out, min(busy, 1.0))


def reduce_load(
    batches: Sequence[ReduceProgress], steps: Sequence[WorkerStats], workers: int, span_s: float
) -> StageLoad:
    """The reduce as the busy-time rule sees it over the last ``span_s``: its batches' rows per
    second in (and out: every row is reduced, as DS2's pass takes it), and its busiest worker's
    busy milliseconds over the span."""
    rows = sum(p.input_rows for p in batches)
    busy_ms: dict[int, float] = defaultdict(float)
    for ws in steps:
        busy_ms[ws.worker] += ws.busy_ms
    busiest = max(busy_ms.values(), default=0.0) / (span_s * 1000) if span_s > 0 else 0.0
    rate = rows / span_s if span_s > 0 else 0.0
    return StageLoad(REDUCE_STAGE, workers, rate, rate, min(busiest, 1.0))
