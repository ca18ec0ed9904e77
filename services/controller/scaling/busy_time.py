"""The rule Ballast's DS2 is compared with: Flink's autoscaler's busy-time estimate (the
``flink-autoscaler`` module of the Flink Kubernetes Operator), per stage in topological order.

A stage's true processing rate is its input rate divided by its **busiest** instance's busy
fraction (Flink's default aggregator, MAX, chosen after skew made AVG overestimate). The capacity
it should have is its target over the utilization target (0.7); it is rescaled only outside the
band ``[target / (u + b), target / (u − b)]`` (boundary ``b`` 0.3), by ``ceil(P × capacity /
TPR)``, a scale-down by at most ``scale_down_max_factor`` (0.6). Its scale-down interval (an hour
in Flink, the maximum recommendation within it) is the same delay as DS2's, so
:class:`~services.controller.scaling.decisions.Decider` times both: for this rule with
``activation`` 1 and a drop of 1.

Same inputs as DS2 where they exist (targets from the source rate plus catch-up, selectivity as
the stage's output ÷ input); what differs is the rate: observed busy time instead of useful time,
and the busiest instance instead of the mean.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from services.controller.scaling.ds2 import EPS, Estimate


@dataclass(frozen=True)
class BusySettings:
    utilization: float = 0.7
    boundary: float = 0.3
    scale_down_max_factor: float = 0.6

    def __post_init__(self) -> None:
        if (
            not 0 < self.utilization - self.boundary < self.utilization <= 1
            or not 0 < self.scale_down_max_factor <= 1
        ):
            raise ValueError(f"invalid busy-time settings: {self}")


@dataclass(frozen=True)
class StageLoad:
    """A stage's window as Flink's metrics see it: records in and out per second, the busiest
    instance's busy fraction, its parallelism. A source has ``source_rate`` and nothing else."""

    name: str
    parallelism: int = 0
    input_rate: float = 0.0
    output_rate: float = 0.0
    busy_max: float = 0.0
    upstream: tuple[str, ...] = ()
    source_rate: float | None = None
    min_instances: int = 1
    max_instances: int | None = None


def busy_time_instances(
    stages: Sequence[StageLoad], settings: BusySettings = BusySettings()
) -> dict[str, Estimate]:
    out_target: dict[str, float] = {}
    estimates: dict[str, Estimate] = {}
    for s in stages:
        if s.source_rate is not None:
            out_target[s.name] = s.source_rate
            continue
        missing = [u for u in s.upstream if u not in out_target]
        if missing or not s.upstream:
            raise ValueError(f"stage {s.name!r}: upstream {missing or 'none'} not before it")
        target = sum(out_target[u] for u in s.upstream)
        selectivity = s.output_rate / s.input_rate if s.input_rate > 0 else 1.0
        if s.input_rate <= 0 or s.busy_max <= 0:
            kept = max(s.parallelism, s.min_instances)
            idle = "idle: no busy time, count kept"
            est = Estimate(
                s.name, s.parallelism, kept, target, None, selectivity, selectivity * target, False, idle
            )
        else:
            est = _estimate(s, target, selectivity, settings)
        estimates[s.name] = est
        out_target[s.name] = est.output_target
    return estimates


def _estimate(s: StageLoad, target: float, selectivity: float, settings: BusySettings) -> Estimate:
    tpr = s.input_rate / s.busy_max  # what the stage carries at its current parallelism
    up_at = target / (settings.utilization + settings.boundary)
    down_at = target / (settings.utilization - settings.boundary)
    if up_at <= tpr <= down_at:
        optimal, why = s.parallelism, f"TPR {tpr:.1f}/s inside [{up_at:.1f}, {down_at:.1f}]: kept"
    else:
        factor = max((target / settings.utilization) / tpr, 1 - settings.scale_down_max_factor)
        optimal = max(math.ceil(s.parallelism * factor - EPS), s.min_instances)
        why = f"TPR {tpr:.1f}/s against capacity {target / settings.utilization:.1f}/s: x{factor:.2f}"
    wanted = optimal
    if s.max_instances is not None:
        optimal = min(optimal, s.max_instances)
    carried = min(target, tpr * optimal / s.parallelism)
    per_instance = tpr / s.parallelism
    capped = optimal < wanted
    return Estimate(
        s.name, s.parallelism, optimal, target, per_instance, selectivity, selectivity * carried, capped, why
    )
