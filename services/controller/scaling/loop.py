"""The scaling loop inside the controller: what the services published since the last evaluation
in, DS2's estimates and decisions out, as control events. No I/O: the controller feeds it metrics
and writes the events it returns in its own transaction.

Decisions, where the issue left them open:

* ``off``: nothing is evaluated. ``dry-run``: every stage is evaluated and decided, and each
  decision is written as a ``SCALING`` event marked ``DRY_RUN``; the policy keeps believing its
  decisions (so the log shows the chain it would have taken, once per change, not the same
  advice every evaluation), and nothing acts on them. ``on``: decisions are ``APPLIED``; a reduce
  decision is followed by the ``SCALE`` that sets the hashed workers.
* **Routers are decided only with an actuator** (``router_actuator``: a hook, or the local stack's
  supervisor). Without one the router stage is estimated (``ballast status`` shows what it
  needs) but never decided: an ``APPLIED`` decision nothing acts on would make the log lie.
* **Nothing is decided while a migration is in flight**: a ``SCALE`` changes every key's hash
  home, and the controller's sequencer refuses one during a migration for the same reason.
  Estimates are still computed; the activation history waits.
* **An operator's SCALE wins** (``on``): the policy's count for the reduce follows the log's
  ``num_workers`` when someone else changed it.
* **Pinned keys bound a scale-down**: a key the routing table pins to worker ``w`` keeps it, so the
  reduce never goes below ``w + 1`` workers (the log's fold refuses such a ``SCALE``); the
  rebalancer's next plan may unpin it.
* **Shedding**: any keep-probability below 1 in the log's state is shedding; no scale-down then
  (:mod:`services.controller.scaling.decisions`).
* **The policy** is DS2 (``ds2``) or, for comparison, Flink's autoscaler's busy-time rule
  (``busy-time``, :mod:`services.controller.scaling.busy_time`) on the same inputs and actuators,
  decided as Flink does: on one estimate (activation 1), any drop a scale-down, after the same
  delay.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field, replace
from typing import Any

from ballast.control.state import ControlState, scale
from ballast.metrics.records import LagSample, ReduceProgress, RouterKeyStats, ScalingStatus, WorkerStats
from services.controller.scaling.busy_time import StageLoad, busy_time_instances
from services.controller.scaling.decisions import Decider, DecisionSettings, StageDecision
from services.controller.scaling.ds2 import Estimate, InstanceWindow, Stage, optimal_instances, source_target
from services.controller.scaling.observations import (
    REDUCE_STAGE,
    ROUTER_STAGE,
    RouterReport,
    Targets,
    reduce_load,
    reduce_rate,
    router_load,
    router_windows,
    targets,
)
from services.controller.scaling.replay import decision_event

MODES = ("off", "dry-run", "on")
POLICIES = ("ds2", "busy-time")
SOURCE = "input"


@dataclass(frozen=True)
class ScalingSettings:
    mode: str = "off"
    interval_s: float = 30.0  # one evaluation this often; router reports older than this are dropped
    catch_up_s: float = 120.0  # a backlog is to be worked off within this long
    reduce_trigger_s: float = 2.0  # the reduce's trigger interval: each batch must end within it
    reduce_cores: int = 0  # cores that run the reduce's tasks, when fixed (0: one per worker)
    model_batches: int = 30  # the reduce's latest batches the cost model is fitted on
    router_actuator: bool = False
    decisions: DecisionSettings = field(default_factory=DecisionSettings)
    policy: str = "ds2"

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"scaling mode must be one of {MODES}, got {self.mode!r}")
        if self.policy not in POLICIES:
            raise ValueError(f"scaling policy must be one of {POLICIES}, got {self.policy!r}")
        if self.interval_s <= 0 or self.catch_up_s <= 0 or self.reduce_trigger_s <= 0:
            raise ValueError(f"scaling intervals must be positive: {self}")


@dataclass(frozen=True)
class Evaluation:
    """One evaluation: the estimates, the decisions and the events that record them."""

    at_s: float
    estimates: dict[str, Estimate]
    decisions: list[StageDecision]
    events: list[tuple[str, dict[str, Any]]]
    held: str = ""  # why nothing was decided (a migration in flight), if so


class ScalingLoop:
    def __init__(
        self,
        settings: ScalingSettings,
        routers: int,
        reduce_workers: int,
        input_partitions: int,
        routed_partitions: int,
    ) -> None:
        self.settings = settings
        self.input_partitions = input_partitions
        self.routed_partitions = routed_partitions
        decisions = settings.decisions
        if settings.policy == "busy-time":  # Flink's: one estimate decides, any drop is one
            decisions = replace(decisions, activation=1, scale_down_min_drop=1, scale_down_min_fraction=0.0)
        self.decider = Decider(decisions, {ROUTER_STAGE: routers, REDUCE_STAGE: reduce_workers})
        self._reports: deque[tuple[float, RouterReport]] = deque()
        self._batches: deque[tuple[ReduceProgress, int]] = deque(maxlen=settings.model_batches)
        self._recent: deque[tuple[float, ReduceProgress | WorkerStats]] = deque()  # for busy time
        self._lags: list[LagSample] = []
        self.last: Evaluation | None = None
        self.last_decision: tuple[StageDecision, str] | None = None  # with its mode

    @property
    def counts(self) -> dict[str, int]:
        return dict(self.decider.counts)

    def observe(self, at_s: float, source: str, start_ms: int, end_ms: int, body: Any, workers: int) -> None:
        """One metrics record as read (``workers``: the log's hashed workers now)."""
        if isinstance(body, RouterKeyStats):
            self._reports.append((at_s, RouterReport(source, start_ms, end_ms, body)))
        elif isinstance(body, ReduceProgress):
            self._batches.append((body, workers))
        elif isinstance(body, LagSample):
            self._lags.append(body)
        if self.settings.policy == "busy-time" and isinstance(body, ReduceProgress | WorkerStats):
            self._recent.append((at_s, body))  # only the busy-time rule reads the last interval's

    def stages(self, state: ControlState, t: Targets) -> list[Stage]:
        s = self.settings
        windows = list(router_windows([r for _, r in self._reports]))
        believed = self.decider.counts[ROUTER_STAGE]
        while len(windows) < believed:  # a router owning no partition reports nothing: no capacity
            windows.append(InstanceWindow(0, 0, 0.0, s.interval_s))
        cores = s.reduce_cores or None
        reduce_max = min(self.routed_partitions, cores) if cores else self.routed_partitions
        workers = self.decider.counts[REDUCE_STAGE]
        modelled = reduce_rate(list(self._batches), workers, s.reduce_trigger_s, cores)
        # a key pinned to worker w keeps w: a SCALE below w + 1 is refused by the log's fold
        pinned_floor = max((int(w) + 1 for w in state.table.values()), default=1)
        return [
            Stage(SOURCE, source_rate=source_target(t.arrival_rate, t.input_backlog, s.catch_up_s)),
            Stage(ROUTER_STAGE, tuple(windows), (SOURCE,), max_instances=max(1, self.input_partitions)),
            Stage(REDUCE_STAGE, (), (ROUTER_STAGE,), min_instances=min(pinned_floor, reduce_max),
                  max_instances=reduce_max, modelled=modelled, catch_up_rate=t.routed_backlog / s.catch_up_s),
        ]  # fmt: skip

    def busy_stages(self, state: ControlState, t: Targets) -> list[StageLoad]:
        """The same stages as :meth:`stages`, as the busy-time rule reads them."""
        s = self.settings
        ds2 = {stage.name: stage for stage in self.stages(state, t)}
        router, red = ds2[ROUTER_STAGE], ds2[REDUCE_STAGE]
        batches = [b for _, b in self._recent if isinstance(b, ReduceProgress)]
        steps = [b for _, b in self._recent if isinstance(b, WorkerStats)]
        workers = self.decider.counts[REDUCE_STAGE]
        return [
            StageLoad(SOURCE, source_rate=ds2[SOURCE].source_rate),
            replace(router_load(router.instances, self.decider.counts[ROUTER_STAGE]), upstream=(SOURCE,),
                    max_instances=router.max_instances),
            replace(reduce_load(batches, steps, workers, s.interval_s), upstream=(ROUTER_STAGE,),
                    min_instances=red.min_instances, max_instances=red.max_instances),
        ]  # fmt: skip

    def evaluate(self, now_s: float, state: ControlState, migrating: bool = False) -> Evaluation:
        s = self.settings
        # a router reports every stats interval, which may be longer than an evaluation's: keep its
        # reports for two of their own spans, so no evaluation finds a working router silent
        longest = max(((r.end_ms - r.start_ms) / 1000 for _, r in self._reports), default=0.0)
        while self._reports and self._reports[0][0] < now_s - max(s.interval_s, 2 * longest):
            self._reports.popleft()
        if s.mode == "on" and state.num_workers != self.decider.counts[REDUCE_STAGE]:
            self.decider.counts[REDUCE_STAGE] = state.num_workers  # an operator's SCALE wins
        while self._recent and self._recent[0][0] < now_s - s.interval_s:
            self._recent.popleft()
        t = targets(self._lags)
        if s.policy == "busy-time":
            estimates = busy_time_instances(self.busy_stages(state, t))
        else:
            estimates = optimal_instances(self.stages(state, t))
        decided = dict(estimates)
        if not s.router_actuator and s.mode == "on":
            decided.pop(ROUTER_STAGE)
        if migrating:
            self.last = Evaluation(now_s, estimates, [], [], held="a migration is in flight")
            return self.last
        shedding = any(p < 1.0 for p in state.keep_probability.values())
        decisions = self.decider.evaluate(now_s, decided, shedding=shedding)
        applied = s.mode == "on"
        events: list[tuple[str, dict[str, Any]]] = []
        inputs = {"arrival_rate": t.arrival_rate, "input_backlog": t.input_backlog,
                  "routed_backlog": t.routed_backlog, "catch_up_s": s.catch_up_s}  # fmt: skip
        for d in decisions:
            events.append(decision_event(d, estimates[d.stage], applied=applied, inputs=inputs))
            if applied and d.stage == REDUCE_STAGE:
                events.append(scale(d.after, f"scaling: {d.reason}"))
            self.last_decision = (d, "APPLIED" if applied else "DRY_RUN")
        self._lags = self._lags[-1000:]
        self.last = Evaluation(now_s, estimates, decisions, events)
        return self.last

    def status(self) -> ScalingStatus:
        """For the status record: instances per stage, true rates, the last decision and its reason."""
        est = self.last.estimates if self.last is not None else {}
        last = ""
        if self.last_decision is not None:
            d, mode = self.last_decision
            last = f"{d.stage} {d.before} -> {d.after} ({mode}): {d.reason}"
        return ScalingStatus(
            self.settings.mode,
            self.counts,
            {k: e.optimal for k, e in est.items()},
            {k: e.true_rate_per_instance for k, e in est.items() if e.true_rate_per_instance},
            last,
        )
