"""DS2's decisions on a simulated two-stage pipeline (routers, then the reduce) with noisy
measurements and a backlog: input stepping 1x -> 2x -> 4x -> 1x of one reduce worker's capacity.
Within each step the counts converge in at most 3 decisions and never revisit a count; the
busy-time rule on the same trace uses at least as many instance-intervals."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest

from services.controller.scaling.busy_time import StageLoad, busy_time_instances
from services.controller.scaling.decisions import Decider, DecisionSettings
from services.controller.scaling.ds2 import InstanceWindow, Stage, optimal_instances, source_target

pytestmark = pytest.mark.unit

INTERVAL_S = 10.0
STEP_S = 400.0
ROUTER_RATE, REDUCE_RATE = 1_500.0, 500.0  # true records/s per instance
STEPS = (1, 2, 4, 1)  # x 90 % of one reduce worker's capacity (at exactly 100 % a backlog never drains)
LOAD = 0.9
MAX_INSTANCES = 16
CATCH_UP_S = 120.0
NOISE = 0.15  # each measured true rate is off by up to this much


@dataclass
class Pipeline:
    routers: int = 1
    workers: int = 1
    input_backlog: float = 0.0
    routed_backlog: float = 0.0

    def run(self, arrival: float, rng: np.random.Generator) -> dict:
        """One interval: what each stage pulled, pushed and was busy for (noisy, as measured)."""
        self.input_backlog += arrival * INTERVAL_S
        routed = min(self.input_backlog, self.routers * ROUTER_RATE * INTERVAL_S)
        self.input_backlog -= routed
        self.routed_backlog += routed
        reduced = min(self.routed_backlog, self.workers * REDUCE_RATE * INTERVAL_S)
        self.routed_backlog -= reduced
        return {"routed": routed, "reduced": reduced}

    def windows(self, done: float, count: int, rate: float, rng: np.random.Generator) -> tuple:
        out = []
        for _ in range(count):
            records = done / count
            useful = min(records / (rate * rng.uniform(1 - NOISE, 1 + NOISE)), INTERVAL_S)
            out.append(InstanceWindow(int(records), int(records), useful, INTERVAL_S))
        return tuple(out)


def simulate(policy: str, seed: int = 5) -> tuple[list[list[tuple[str, int]]], float]:
    """Decisions per step and instance-seconds used, for ``policy`` ds2 or busy-time."""
    rng = np.random.default_rng(seed)
    p = Pipeline()
    settings = DecisionSettings(warmup=1, activation=2, scale_down_delay_s=60.0)
    if policy == "busy-time":
        settings = DecisionSettings(warmup=1, activation=1, scale_down_delay_s=60.0, scale_down_min_drop=1)
    decider = Decider(settings, {"router": 1, "reduce": 1})
    per_step: list[list[tuple[str, int]]] = []
    used = 0.0
    now = 0.0
    for factor in STEPS:
        arrival = factor * LOAD * REDUCE_RATE
        decisions: list[tuple[str, int]] = []
        for _ in range(int(STEP_S / INTERVAL_S)):
            done = p.run(arrival, rng)
            now += INTERVAL_S
            used += (p.routers + p.workers) * INTERVAL_S
            target = source_target(arrival, p.input_backlog + p.routed_backlog, CATCH_UP_S)
            if policy == "ds2":
                estimates = optimal_instances([
                    Stage("input", source_rate=target),
                    Stage("router", p.windows(done["routed"], p.routers, ROUTER_RATE, rng), ("input",),
                          max_instances=MAX_INSTANCES),
                    Stage("reduce", p.windows(done["reduced"], p.workers, REDUCE_RATE, rng), ("router",),
                          max_instances=MAX_INSTANCES),
                ])  # fmt: skip
            else:
                routed, reduced = done["routed"] / INTERVAL_S, done["reduced"] / INTERVAL_S
                estimates = busy_time_instances([
                    StageLoad("input", source_rate=target),
                    StageLoad("router", p.routers, routed, routed, _busy(routed, p.routers, ROUTER_RATE),
                              ("input",), max_instances=MAX_INSTANCES),
                    StageLoad("reduce", p.workers, reduced, reduced, _busy(reduced, p.workers, REDUCE_RATE),
                              ("router",), max_instances=MAX_INSTANCES),
                ])  # fmt: skip
            for d in decider.evaluate(now, estimates):
                decisions.append((d.stage, d.after))
                if d.stage == "router":
                    p.routers = d.after
                else:
                    p.workers = d.after
        per_step.append(decisions)
    return per_step, used


def _busy(per_s: float, count: int, rate: float) -> float:
    """The busiest instance's busy fraction (an even split: the simulation has no skew)."""
    return min(per_s / count / rate, 1.0)


def test_ds2_converges_within_3_decisions_a_step_and_never_revisits_a_count() -> None:
    per_step, _used = simulate("ds2")
    counts = {"router": 1, "reduce": 1}
    for factor, decisions in zip(STEPS, per_step, strict=True):
        seen = {s: [counts[s]] for s in counts}
        for stage, after in decisions:
            seen[stage].append(after)
            counts[stage] = after
        for stage in counts:
            made = [after for s, after in decisions if s == stage]
            assert len(made) <= 3, f"step x{factor}: {stage} took {len(made)} decisions: {made}"
        for stage, path in seen.items():
            assert len(path) == len(set(path)), f"step x{factor}: {stage} revisited a count: {path}"
            assert path == sorted(path) or path == sorted(path, reverse=True), f"{stage} oscillated: {path}"
        need = math.ceil(factor * LOAD)
        assert counts["reduce"] == need, f"step x{factor}: reduce ended at {counts['reduce']}, needs {need}"
        assert counts["router"] == math.ceil(factor * LOAD * REDUCE_RATE / ROUTER_RATE)


def test_ds2_uses_no_more_instance_seconds_than_the_busy_time_rule() -> None:
    _ds2_steps, ds2 = simulate("ds2")
    _busy_steps, busy = simulate("busy-time")
    fixed_at_max = 2 * MAX_INSTANCES * STEP_S * len(STEPS)
    assert ds2 <= busy < fixed_at_max, (ds2, busy, fixed_at_max)
