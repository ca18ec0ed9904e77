"""What one policy's run comes to, and the acceptance's verdicts across policies. Pure: the run's
timeline and decisions in, figures out (unit tested on runs made by hand).

Per policy, per step of the input (1× → 2× → 4× → 1× of one instance's capacity):

* **decisions** applied in the step, per stage, and the **time to the final count** (from the
  step's start to its last decision; 0 when it decided nothing);
* **revisits**: a count the stage left and came back to within the step (oscillation);

and over the whole run: **instance-seconds** per stage (the count in force, integrated over the
run's time), **seconds with the lag over the target** (from the lag samples, each standing for the
time to the next), and the **shed windows** (given by the run's judge).

Why the count in force comes from the decisions, not from sampled status: a status sampled every
few seconds misses a count held shorter than that, and instance-seconds must add up what ran.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Step:
    start_s: float
    end_s: float
    times: float  # the input rate, times one instance's capacity


@dataclass(frozen=True)
class Decision:
    at_s: float
    stage: str
    before: int
    after: int


@dataclass(frozen=True)
class StepFigures:
    times: float
    decisions: int
    time_to_final_s: float
    final: int
    revisits: int


def counts_over_time(decisions: Sequence[Decision], stage: str, initial: int) -> list[tuple[float, int]]:
    """(time, count from then on) for ``stage``, starting with ``initial`` at time 0."""
    out = [(0.0, initial)]
    for d in sorted((d for d in decisions if d.stage == stage), key=lambda d: d.at_s):
        out.append((d.at_s, d.after))
    return out


def instance_seconds(decisions: Sequence[Decision], stage: str, initial: int, end_s: float) -> float:
    """The count in force integrated from 0 to ``end_s``."""
    series = [(t, c) for t, c in counts_over_time(decisions, stage, initial) if t < end_s]
    total = 0.0
    for (t, c), (t_next, _) in zip(series, [*series[1:], (end_s, 0)], strict=True):
        total += c * (t_next - t)
    return total


def step_figures(
    steps: Sequence[Step], decisions: Sequence[Decision], stage: str, initial: int
) -> list[StepFigures]:
    out = []
    count = initial
    for step in steps:
        inside = sorted((d for d in decisions if d.stage == stage and step.start_s <= d.at_s < step.end_s),
                        key=lambda d: d.at_s)  # fmt: skip
        seen = [count]
        revisits = 0
        for d in inside:
            if d.after in seen and d.after != seen[-1]:
                revisits += 1
            seen.append(d.after)
        count = seen[-1]
        last = inside[-1].at_s - step.start_s if inside else 0.0
        out.append(StepFigures(step.times, len(inside), last, count, revisits))
    return out


def seconds_over(samples: Sequence[tuple[float, float]], target_s: float, end_s: float) -> float:
    """Seconds with the lag over ``target_s``: each (time, lag) sample stands until the next."""
    ordered = sorted(samples)
    if not ordered:
        return 0.0
    total = 0.0
    for (t, lag), (t_next, _) in zip(ordered, [*ordered[1:], (end_s, 0.0)], strict=True):
        if lag > target_s:
            total += max(0.0, t_next - t)
    return total


def summary(
    steps: Sequence[Step],
    decisions: Sequence[Decision],
    initial: Mapping[str, int],
    lags: Sequence[tuple[float, float]],
    target_s: float,
    end_s: float,
    shed_windows: int,
) -> dict[str, object]:
    """One policy's figures: per stage its steps and instance-seconds; the lag over target; shed."""
    return {
        "steps": {st: step_figures(steps, decisions, st, n) for st, n in initial.items()},
        "instance_seconds": {st: instance_seconds(decisions, st, n, end_s) for st, n in initial.items()},
        "lag_over_target_s": seconds_over(lags, target_s, end_s),
        "shed_windows": shed_windows,
    }


def verdicts(policies: Mapping[str, Mapping[str, object]], stage: str = "reduce") -> dict[str, object]:
    """The acceptance's verdicts for DS2 against the others (each entry as :func:`summary` gives)."""
    ds2 = policies.get("ds2")
    if ds2 is None:
        return {}
    steps: list[StepFigures] = ds2["steps"][stage]  # type: ignore[index]
    out: dict[str, object] = {
        "within_3_decisions_each_step": all(s.decisions <= 3 for s in steps),
        "no_count_revisited": all(s.revisits == 0 for s in steps),
    }
    used = float(ds2["instance_seconds"][stage])  # type: ignore[index]
    over = float(ds2["lag_over_target_s"])  # type: ignore[arg-type]
    if "fixed-max" in policies:
        out["fewer_instance_seconds_than_fixed_max"] = used < float(
            policies["fixed-max"]["instance_seconds"][stage]  # type: ignore[index]
        )
    if "busy-time" in policies:
        busy = policies["busy-time"]
        out["instance_seconds_at_most_busy_time"] = used <= float(busy["instance_seconds"][stage])  # type: ignore[index]
        out["lag_over_target_at_most_busy_time"] = over <= float(busy["lag_over_target_s"])  # type: ignore[arg-type]
    return out
