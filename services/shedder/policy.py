"""The shedding policy: once per cycle, from each input stream's time lag and the measured rates, the
keep-probabilities the routers should apply (docs/shedder.md, "Shedding policy").

Pure: no Kafka, no clock, no I/O. The shedder service measures, calls :meth:`SheddingPolicy.decide`
once per cycle, logs the decision's status and reason, and asks the controller for a ``SHEDDING``
setting only for the streams in :attr:`Decision.changes`.

**The model** is Stream-Economics' (Alves & Veiga) with one resource: every stream goes through the
same routers and reduce, so they share one capacity (records per second the pipeline processes).
Accuracy is the paper's, the fraction of a stream's records that are processed, so a stream's
minimum accuracy is the floor of its keep-probability. A plan (:func:`allocate`):

1. *Budget.* The kept load may be at most ``capacity * (1 - headroom) - backlog / drain_horizon``:
   the drain term makes room to clear the records already waiting within the horizon.
2. *Minimums first.* Every stream's minimum load (``min_accuracy * arrival``) is reserved. If they
   exceed the budget, every stream's goal is its minimum, the fastest drain there is. Only if the
   minimums exceed the capacity itself is the status ``CANNOT_HOLD``: the lag then grows whatever
   is shed, and the minimums are held, never gone below.
3. *The rest by priority.* What remains goes to the highest priority first; within one priority it
   is shared evenly in records per second, smallest need first (the paper's ``distributeEvenly``),
   so a stream that needs little is served whole. A stream's goal is below 1 only when every
   lower-priority stream's goal is its minimum: lower priority loses accuracy first.

**When.** A stream *triggers* a shed when its time lag, or the wait the backlog promises to records
arriving now (``backlog / capacity``), exceeds its target, or when its lag rose ``rising_cycles``
cycles in a row while the kept load exceeds the capacity by ``overload_margin`` (the rates confirm
the trend, so a lag that wobbles at capacity starts nothing). Why the promised wait: Kafka's time
lag is the age of the oldest unread record, and records already routed are read whatever is shed
after them, so a shed shows in the lag only one lag-length later; the backlog says now what the lag
will become. A stream is *calm* when its lag and the promised wait are under
``target * (1 - lift_margin)`` and its lag is not rising. Then:

* **shed** if a stream triggers, or a shed is in force and some lag is not yet under its lift
  threshold or keeps rising (for ``rising_cycles``, at a lag of a cycle or more: a sub-cycle lag is
  noise at this scale). The bounded step may leave a shed short of its goal when the trigger has
  passed; it goes on. Keeps move toward the plan's goals, never up;
* **lift** if every stream is calm: planned with every keep in force as a floor (a calm pipeline
  is never shed more), the same headroom (the band between ``capacity * (1 - headroom)`` and
  ``capacity * (1 + overload_margin)`` is the hysteresis in rates), and keeps move up;
* **hold** every keep otherwise (a lag between its lift threshold and its target, no shed in force).

**Pace.** Per cycle a keep moves by at most a factor ``step_factor`` or by ``step_abs``, whichever is
the larger move (defaults 2 and 0.25): from any keep, 1 is reached in 3 lifts (``k + 0.25``, then
doubling twice reaches 1 from any ``k > 0``), and from 1 any goal in 3 sheds (0.5, 0.25, 0). One
exception: a planned lift (a measured capacity) whose goal is 1, because the stream's whole offered
load fits the budget, goes to 1 at once. The bound guards against a wrong plan; a load that fits
under the capacity less its headroom and the drain is no close call, and stepping there only
keeps results inexact longer (a benchmark lifted a cycle after the acceptance's 3 for that alone). A move
smaller than ``min_change`` is not made, except one that reaches 1 or the minimum: the service
sends no request for noise. A keep in force below the stream's minimum is raised to it at once.

**Capacity.** With a reduce job reporting, the capacity is measured directly: the reduce's rows per
busy second over its recent batches (:mod:`services.shedder.capacity`, DS2's true processing rate),
passed as ``capacity``. It does not depend on the load, so a shed in force never reads as a smaller
capacity; it under-reads at low load (each batch's fixed cost), which only makes lifts climb in
more steps. Without it (no reduce job: the routers are the pipeline), ``service_rate``, the
measured processing rate, is the capacity only while the pipeline is saturated: some lag over its
lift threshold, or rising ``rising_cycles`` in a row. While it keeps up, the processing rate is just
the kept load. So the policy then remembers the last saturated rate and otherwise plans with the
larger of that and the rate now. With nothing remembered (after a restart), a calm pipeline lifts
by steps, as if the capacity were unbounded, until it saturates. Why the measured capacity is
preferred: on a micro-batch reduce the lag is a saw-tooth that rises two cycles in a row while it
keeps up, and the processing rate under shedding then read as the capacity (229/s for a reduce
measured at 1,226/s in a benchmark), ratcheting the shedding down instead of lifting it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from services.shedder.config import PolicySettings, StreamDeclaration

_EPS = 1e-9


class Trend(StrEnum):
    """A stream's lag since the last cycle, as the lag estimator classifies it."""

    RISING = "rising"
    FLAT = "flat"
    FALLING = "falling"


class Status(StrEnum):
    """The decision's one word for logs and the metric.

    ``OK``: nothing shed. ``SHEDDING``: some keep below 1 (lowered this cycle, or held).
    ``LIFTING``: some keep raised this cycle. ``CANNOT_HOLD``: the minimum accuracies alone are
    more than the capacity, so the lag grows whatever is shed; every stream is held at its minimum
    (approached at the bounded pace), never below.
    """

    OK = "OK"
    SHEDDING = "SHEDDING"
    LIFTING = "LIFTING"
    CANNOT_HOLD = "CANNOT_HOLD"


class Mode(StrEnum):
    """Which way the keeps may move this cycle (module docstring, "When")."""

    SHED = "shed"
    HOLD = "hold"
    LIFT = "lift"


@dataclass(frozen=True)
class Observation:
    """One stream's measurements for one cycle.

    ``arrival_rate``: records per second *offered* on the topic (before shedding: from the log-end
    offsets). ``backlog``: records of the stream, as kept, still to be processed; ``None``: estimated
    as ``lag_s * arrival_rate * keep`` (the kept records of the last ``lag_s`` seconds; it lags one
    lag-length behind a change of the keep).
    """

    keep: float
    lag_s: float
    trend: Trend
    arrival_rate: float
    backlog: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "trend", Trend(self.trend))
        for name in ("keep", "lag_s", "arrival_rate", "backlog"):
            value = getattr(self, name)
            if value is None and name == "backlog":
                continue
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        if self.keep > 1:
            raise ValueError(f"keep must be in [0, 1], got {self.keep!r}")

    def waiting(self) -> float:
        return self.lag_s * self.arrival_rate * self.keep if self.backlog is None else self.backlog


@dataclass(frozen=True)
class StreamOutcome:
    """What the cycle decided for one stream, with the figures it used."""

    topic: str
    keep_before: float
    keep: float
    goal: float
    lag_s: float
    triggered: bool
    rising_cycles: int

    @property
    def changed(self) -> bool:
        return self.keep != self.keep_before


@dataclass(frozen=True)
class Decision:
    """One cycle's result: the keep per stream, a status and a one-line reason, and the figures."""

    status: Status
    reason: str
    mode: Mode
    streams: Mapping[str, StreamOutcome]
    capacity: float
    budget: float
    kept_load: float
    minimum_load: float
    backlog: float
    wait_s: float

    @property
    def keep(self) -> dict[str, float]:
        return {t: s.keep for t, s in self.streams.items()}

    @property
    def changes(self) -> dict[str, float]:
        """The streams whose keep-probability changed: the only ones to send to the controller."""
        return {t: s.keep for t, s in self.streams.items() if s.changed}


def allocate(
    budget: float, streams: Sequence[tuple[str, int, float, float]]
) -> tuple[dict[str, float], bool]:
    """Keep-probability goals for ``(topic, priority, arrival_rate, floor)`` within ``budget`` rec/s.

    Floors are reserved first; the rest is given to the highest priority first and, within a
    priority, evenly in records per second, the smallest need first (a need is what lifts a stream
    from its floor to 1). Returns the goals and whether the floors fit the budget (if not, every goal
    is its floor). A stream with no arrivals costs nothing and keeps everything.
    """
    floor_load = sum(rate * floor for _, _, rate, floor in streams)
    goals = {topic: (1.0 if rate <= 0 else floor) for topic, _, rate, floor in streams}
    if floor_load > budget + _EPS:
        return goals, False
    left = budget - floor_load
    for priority in sorted({p for _, p, _, _ in streams}, reverse=True):
        level = sorted(
            ((rate * (1.0 - floor), topic, rate, floor) for topic, p, rate, floor in streams
             if p == priority and rate > 0),
        )
        for i, (need, topic, rate, floor) in enumerate(level):
            give = max(0.0, min(need, left / (len(level) - i)))
            left -= give
            goals[topic] = 1.0 if give >= need - _EPS else min(1.0, floor + give / rate)
    return goals, True


def bounded_step(keep: float, goal: float, factor: float, absolute: float) -> float:
    """``keep`` moved toward ``goal`` by at most a factor or an absolute amount, whichever is more."""
    if goal < keep:
        return max(goal, min(keep / factor, keep - absolute))
    return min(goal, max(keep * factor, keep + absolute))


class SheddingPolicy:
    """The policy for a fixed set of declared streams; it remembers only what one cycle cannot see:
    how many cycles in a row each lag has risen, and the capacity last measured while saturated.

    Both are soft state: the keeps in force come in with every cycle (the control log is their
    truth), so a restarted policy decides from the same facts, only with the rising count back at
    zero and no capacity remembered: a calm pipeline then lifts by steps until it saturates once.
    """

    def __init__(self, settings: PolicySettings, streams: Sequence[StreamDeclaration]) -> None:
        if not streams:
            raise ValueError("no streams declared")
        topics = [s.topic for s in streams]
        if len(set(topics)) != len(topics):
            raise ValueError(f"a topic is declared twice: {topics}")
        self.settings = settings
        self.streams = {s.topic: s for s in streams}
        self._rising = dict.fromkeys(topics, 0)
        self._capacity: float | None = None

    def decide(
        self,
        observations: Mapping[str, Observation],
        service_rate: float,
        cycle_s: float,
        capacity: float | None = None,
    ) -> Decision:
        """One cycle: every declared stream's observation, the pipeline's processing rate
        (records/s, shared by all streams), the cycle's length in seconds, and the capacity when it
        is measured directly (records/s; None: inferred from the processing rate, see "Capacity")."""
        missing = sorted(set(self.streams) - set(observations))
        unknown = sorted(set(observations) - set(self.streams))
        if missing or unknown:
            raise ValueError(f"observations must name exactly the declared streams: missing {missing}, "
                             f"undeclared {unknown}")
        if not math.isfinite(service_rate) or service_rate < 0:
            raise ValueError(f"service_rate must be a finite number >= 0, got {service_rate!r}")
        if not math.isfinite(cycle_s) or cycle_s <= 0:
            raise ValueError(f"cycle_s must be a finite number > 0, got {cycle_s!r}")
        if capacity is not None and (not math.isfinite(capacity) or capacity <= 0):
            raise ValueError(f"capacity must be a finite number > 0 or None, got {capacity!r}")
        cfg = self.settings
        obs = {t: observations[t] for t in self.streams}
        for topic, o in obs.items():
            self._rising[topic] = self._rising[topic] + 1 if o.trend is Trend.RISING else 0

        measured = capacity is not None
        capacity = capacity if capacity is not None else self._capacity_now(obs, service_rate)
        backlog = sum(o.waiting() for o in obs.values())
        wait_s = backlog / capacity if capacity > 0 else (math.inf if backlog > 0 else 0.0)
        horizon = max(cfg.drain_horizon_s, cycle_s)
        drain = backlog / horizon
        kept_load = sum(o.arrival_rate * o.keep for o in obs.values())
        minimum_load = sum(o.arrival_rate * self.streams[t].min_accuracy for t, o in obs.items())
        overloaded_rates = kept_load > capacity * (1.0 + cfg.overload_margin)

        triggers: dict[str, str] = {}
        calm, unfinished = True, False
        for topic, o in obs.items():
            target = self.streams[topic].target_s
            rising = self._rising[topic] >= cfg.rising_cycles
            if o.lag_s > target:
                triggers[topic] = f"lag {o.lag_s:.1f} s > target {target:g} s"
            elif wait_s > target:
                triggers[topic] = f"backlog waits {wait_s:.1f} s > target {target:g} s"
            elif rising and overloaded_rates:
                triggers[topic] = (f"lag rising {self._rising[topic]} cycles, kept load {kept_load:.0f}/s > "
                                   f"capacity {capacity:.0f}/s")
            lift_below = target * (1.0 - cfg.lift_margin)
            calm = calm and max(o.lag_s, wait_s) < lift_below and o.trend is not Trend.RISING
            # a lag under one cycle is no backlog to go on shedding for: at that scale it is noise
            unfinished = unfinished or max(o.lag_s, wait_s) >= lift_below or (rising and o.lag_s >= cycle_s)
        # a shed in force goes on toward its goal while a lag is above its lift threshold or keeps
        # rising: the bounded step may have left it short of the goal when the trigger has passed
        shedding = any(o.keep < 1.0 for o in obs.values())
        mode = Mode.SHED if triggers or (shedding and unfinished) else Mode.LIFT if calm else Mode.HOLD

        budget = capacity * (1.0 - cfg.headroom) - drain
        feasible = True
        if mode is Mode.SHED:
            goals, feasible = allocate(budget, self._demands(obs, floor_at_keep=False))
        elif mode is Mode.LIFT:
            # the keeps in force are the floors: calm is never shed more. A capacity never seen
            # saturated (since a restart) is only the kept load: then lift by steps, unplanned
            if self._capacity is None and not measured:
                budget = math.inf
            goals, _ = allocate(budget, self._demands(obs, floor_at_keep=True))
        else:
            goals = {t: o.keep for t, o in obs.items()}

        # a planned lift whose goal is 1 (the stream's whole offered load fits the budget) goes there
        # at once: the bounded step guards against a plan that may be wrong, and the whole load
        # fitting under a measured capacity with its headroom and the drain is no close call
        whole = mode is Mode.LIFT and math.isfinite(budget)
        outcomes = {}
        for topic, o in obs.items():
            if whole and goals[topic] >= 1.0:
                new = 1.0
            else:
                new = self._move(o.keep, goals[topic], mode, self.streams[topic].min_accuracy)
            outcomes[topic] = StreamOutcome(
                topic, o.keep, new, goals[topic], o.lag_s, topic in triggers, self._rising[topic]
            )
        # at the minimums the backlog drains slower than the horizon, but it drains: still a shed.
        # Only minimums that the capacity cannot even keep up with mean the target cannot be held.
        holdable = feasible or minimum_load < capacity
        status = self._status(mode, holdable, outcomes)
        figures = (capacity, budget, kept_load, minimum_load, backlog, wait_s)
        reason = self._reason(status, mode, feasible, triggers, outcomes, figures, horizon)
        return Decision(status, reason, mode, outcomes, *figures)

    def _capacity_now(self, obs: Mapping[str, Observation], service_rate: float) -> float:
        # saturated: some lag over its lift threshold or rising `rising_cycles` in a row. Not any
        # lag, nor one rise: a micro-batch reduce has a lag, and a saw-tooth, even when it keeps up
        cfg = self.settings
        lift = 1.0 - cfg.lift_margin
        if any(
            o.lag_s >= self.streams[t].target_s * lift or self._rising[t] >= cfg.rising_cycles
            for t, o in obs.items()
        ):
            self._capacity = service_rate
            return service_rate
        return max(service_rate, self._capacity or 0.0)

    def _demands(
        self, obs: Mapping[str, Observation], floor_at_keep: bool
    ) -> list[tuple[str, int, float, float]]:
        """Each stream's priority, rate and floor: its minimum, or (``floor_at_keep``) its keep in force."""
        out = []
        for topic, o in obs.items():
            declared = self.streams[topic]
            floor = max(o.keep, declared.min_accuracy) if floor_at_keep else declared.min_accuracy
            out.append((topic, declared.priority, o.arrival_rate, floor))
        return out

    def _move(self, keep: float, goal: float, mode: Mode, minimum: float) -> float:
        cfg = self.settings
        if (mode is Mode.SHED and goal < keep) or (mode is Mode.LIFT and goal > keep):
            new = bounded_step(keep, goal, cfg.step_factor, cfg.step_abs)
        else:
            new = keep
        new = max(minimum, min(1.0, round(new, 3)))
        if new == keep or (abs(new - keep) < cfg.min_change and new not in (1.0, minimum)):
            return keep if keep >= minimum else minimum
        return new

    @staticmethod
    def _status(mode: Mode, holdable: bool, outcomes: Mapping[str, StreamOutcome]) -> Status:
        if not holdable:
            return Status.CANNOT_HOLD
        if any(s.keep > s.keep_before for s in outcomes.values()):
            return Status.LIFTING
        return Status.SHEDDING if any(s.keep < 1.0 for s in outcomes.values()) else Status.OK

    @staticmethod
    def _reason(
        status: Status,
        mode: Mode,
        feasible: bool,
        triggers: Mapping[str, str],
        outcomes: Mapping[str, StreamOutcome],
        figures: tuple[float, ...],
        horizon: float,
    ) -> str:
        capacity, budget, kept_load, minimum_load, backlog, _ = figures
        moves = ", ".join(
            f"{t} {s.keep_before:g}->{s.keep:g}" for t, s in outcomes.items() if s.changed
        ) or "no change"
        if math.isinf(budget):
            plan = (f"capacity not yet measured saturated (processing {capacity:.0f}/s, kept load "
                    f"{kept_load:.0f}/s): lifting by steps")
        else:
            plan = (f"capacity {capacity:.0f}/s, kept load {kept_load:.0f}/s, budget {budget:.0f}/s "
                    f"(backlog {backlog:.0f} cleared within {horizon:g} s)")
        why = "; ".join(f"{t}: {w}" for t, w in triggers.items())
        if status is Status.CANNOT_HOLD:
            return (f"cannot hold: {why}; the minimum accuracies need {minimum_load:.0f}/s, the capacity "
                    f"is {capacity:.0f}/s: holding the minimums, the lag grows; {moves}; {plan}")
        if mode is Mode.SHED:
            why = why or "shedding in force and a lag not yet under its lift threshold"
            if not feasible:
                why += (f"; at the minimums ({minimum_load:.0f}/s) the backlog drains in "
                        f"{backlog / (capacity - minimum_load):.0f} s, more than the horizon")
            return f"shed: {why}; {moves}; {plan}"
        if status is Status.OK and mode is Mode.LIFT:
            return f"ok: nothing shed; {plan}"
        if mode is Mode.LIFT:
            held = "" if status is not Status.SHEDDING else " (no room in the budget yet)"
            return f"lift: every lag under its lift threshold and not rising{held}; {moves}; {plan}"
        return f"hold: a lag between its lift threshold and its target, or rising; {moves}; {plan}"
