"""DS2's model: true rates from useful time, and the fewest instances per stage that carry a
target rate, for every stage in one topological pass (Kalavri et al., OSDI'18; Hoffmann's thesis,
ch. 4).

Why useful time: an instance that waits on an empty input, a full output or a commit is not at
its capacity, so records per *observed* second understate what it can do; records per *useful*
second (decode, work, encode, produce) are its true rate, and a stage's capacity is its instances'
true rates summed. The target of a stage is what its upstream stages must push at their own
targets; a stage's selectivity (true output ÷ true processing rate) carries the target on.

Decisions where the thesis is silent, each tested:

* A stage whose instances did no useful work in the window (none pulled a record) has no true
  rate: it keeps its count, says so in its reason, and passes its input target on unchanged
  (selectivity 1), so one idle stage does not stop the pass.
* Counts are clamped to ``[min_instances, max_instances]`` (the input partitions bound the
  routers, the routed partitions the reduce); a clamped estimate says it is capped, and the
  capped stage's output target is what the capped count can push, not what was asked.
* The true rate per instance averages the instances that worked: an instance with no records
  (more routers than input partitions) adds no capacity and is not counted as slow.
* ``ceil`` forgives 1e-9 of float error, so 40 / 10 is 4 instances, not 5.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

EPS = 1e-9


@dataclass(frozen=True)
class InstanceWindow:
    """One instance's report over one window: records pulled and pushed, useful and observed seconds."""

    pulled: int
    pushed: int
    useful_s: float
    window_s: float

    def __post_init__(self) -> None:
        if self.pulled < 0 or self.pushed < 0 or self.useful_s < 0 or self.window_s <= 0:
            raise ValueError(f"an instance window needs counts >= 0, useful >= 0, window > 0: {self}")
        if self.useful_s > self.window_s * (1 + 1e-6):
            raise ValueError(f"useful time {self.useful_s} s exceeds the window's {self.window_s} s")

    @property
    def true_processing_rate(self) -> float | None:
        return self.pulled / self.useful_s if self.useful_s > 0 else None

    @property
    def true_output_rate(self) -> float | None:
        return self.pushed / self.useful_s if self.useful_s > 0 else None

    @property
    def observed_processing_rate(self) -> float:
        return self.pulled / self.window_s


@dataclass(frozen=True)
class ModelledRate:
    """A stage whose rate per instance comes from a cost model, not from instance windows: the
    micro-batch reduce (:mod:`services.controller.scaling.batch_model`). ``rate_per_instance``
    None: the model says no count keeps up (its fixed cost fills the trigger)."""

    current: int
    rate_per_instance: float | None
    selectivity: float = 1.0
    why: str = ""


@dataclass(frozen=True)
class Stage:
    """A stage as the pass sees it. A *source* (``source_rate`` set, no instances) stands for the
    input: its output target is the rate the pipeline must carry (arrival plus catch-up)."""

    name: str
    instances: tuple[InstanceWindow, ...] = ()
    upstream: tuple[str, ...] = ()
    source_rate: float | None = None
    min_instances: int = 1
    max_instances: int | None = None
    modelled: ModelledRate | None = None
    # the stage's own input backlog worked off in the catch-up time (records/s), on top of what its
    # upstream stages push: a reduce behind its routed topic must catch up as the routers must
    catch_up_rate: float = 0.0

    @property
    def is_source(self) -> bool:
        return self.source_rate is not None


@dataclass(frozen=True)
class Estimate:
    """What the pass found for one stage, with the inputs a replay needs to explain it."""

    stage: str
    current: int
    optimal: int
    target_rate: float  # records per second the stage must pull
    true_rate_per_instance: float | None
    selectivity: float
    output_target: float  # records per second it pushes at its target
    capped: bool
    reason: str


def source_target(arrival_rate: float, backlog_records: float, catch_up_s: float) -> float:
    """The rate the input must be carried at: what arrives, plus the backlog worked off in
    ``catch_up_s`` (Flink's autoscaler's catch-up term; DS2 itself has none)."""
    if catch_up_s <= 0:
        raise ValueError("catch_up_s must be positive")
    return max(arrival_rate, 0.0) + max(backlog_records, 0.0) / catch_up_s


def _ceil(x: float) -> int:
    return math.ceil(x - EPS)


def optimal_instances(stages: Sequence[Stage]) -> dict[str, Estimate]:
    """Every non-source stage's optimal count, in one pass over ``stages`` (topological order)."""
    out_target: dict[str, float] = {}
    estimates: dict[str, Estimate] = {}
    for stage in stages:
        missing = [u for u in stage.upstream if u not in out_target]
        if missing:
            raise ValueError(f"stage {stage.name!r} comes before its upstream {missing}: not topological")
        if stage.name in out_target:
            raise ValueError(f"stage {stage.name!r} appears twice")
        if stage.is_source:
            if stage.upstream or stage.instances:
                raise ValueError(f"source {stage.name!r} has upstream stages or instances")
            out_target[stage.name] = float(stage.source_rate or 0.0)
            continue
        if not stage.upstream:
            raise ValueError(f"stage {stage.name!r} has no upstream and no source rate")
        upstream = sum(out_target[u] for u in stage.upstream)
        estimate = _estimate(stage, upstream + max(stage.catch_up_rate, 0.0))
        estimates[stage.name] = estimate
        out_target[stage.name] = estimate.output_target
    return estimates


def _estimate(stage: Stage, target: float) -> Estimate:
    if stage.modelled is not None:
        m = stage.modelled
        current, per_instance, selectivity = m.current, m.rate_per_instance, m.selectivity
        if per_instance is None or per_instance <= 0:
            return _kept(stage, current, target, m.why or "the model gives no rate per instance")
    else:
        current = len(stage.instances)
        measured = [w for w in stage.instances if w.useful_s > 0 and w.pulled > 0]
        if current == 0 or not measured:
            return _kept(stage, current, target, "no useful work measured")
        processing = sum(w.true_processing_rate or 0.0 for w in measured)
        output = sum(w.true_output_rate or 0.0 for w in measured)
        per_instance = processing / len(measured)
        selectivity = output / processing
    wanted = max(_ceil(target / per_instance), 1)
    optimal = max(wanted, stage.min_instances)
    if stage.max_instances is not None:
        optimal = min(optimal, stage.max_instances)
    capped = optimal < wanted
    carried = min(target, optimal * per_instance)
    reason = (f"target {target:.1f}/s over {per_instance:.1f}/s per instance = {target / per_instance:.2f}"
              + (f", capped at {optimal}" if capped else ""))  # fmt: skip
    return Estimate(stage.name, current, optimal, target, per_instance, selectivity, selectivity * carried,
                    capped, reason)  # fmt: skip


def _kept(stage: Stage, current: int, target: float, why: str) -> Estimate:
    """No rate to size the stage by: it keeps its count and passes its target on unchanged."""
    return Estimate(stage.name, current, max(current, stage.min_instances), target, None, 1.0, target,
                    False, f"{why}: count kept")  # fmt: skip
