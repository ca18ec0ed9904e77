"""The controller's scaling loop, driven: metrics in, ``SCALING`` (and ``SCALE``) events out, each
stage's decisions to its hook once committed, a status for the controller's record.

Why apart from :mod:`services.controller.service`: the controller's loop only says when (metrics
read, evaluation due, events committed); what scaling does with them is this module's, and the
policy itself is pure (:mod:`services.controller.scaling`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from ballast.control.state import ControlState
from ballast.kafka.admin import make_admin, partition_count
from ballast.kafka.configuration import KafkaConfig
from ballast.kafka.topics import TopicLayout
from ballast.metrics.records import LagSample, ReduceProgress, RouterKeyStats, ScalingStatus, WorkerStats
from services.controller.actuators import HookCall, ScalingHook
from services.controller.config import ControllerSettings
from services.controller.scaling.decisions import DecisionSettings
from services.controller.scaling.loop import ScalingLoop, ScalingSettings
from services.controller.scaling.observations import REDUCE_STAGE, ROUTER_STAGE

log = logging.getLogger(__name__)

# appends an event of the controller's own (the sequencer's numbering); returns it with its epoch
OwnEvent = Callable[[str, dict[str, Any]], dict[str, Any]]


class Autoscaler:
    def __init__(self, s: ControllerSettings, input_partitions: int, routed_partitions: int) -> None:
        self.settings = s
        decisions = DecisionSettings(s.scaling_warmup, s.scaling_activation, s.scale_down_delay_s)
        policy = ScalingSettings(
            s.scaling,
            s.scaling_interval_s,
            s.scaling_catch_up_s,
            s.reduce_trigger_s,
            s.reduce_cores,
            router_actuator=bool(s.router_hook),
            decisions=decisions,
            policy=s.scaling_policy,
        )
        self.loop = ScalingLoop(policy, s.routers, 1, input_partitions, routed_partitions)
        self.hooks: dict[str, ScalingHook] = {}
        if s.router_hook:
            self.hooks[ROUTER_STAGE] = ScalingHook(s.router_hook, s.router_hook_timeout_s, ROUTER_STAGE)
        if s.reduce_hook:
            self.hooks[REDUCE_STAGE] = ScalingHook(s.reduce_hook, s.reduce_hook_timeout_s, REDUCE_STAGE)
        self._calls: list[HookCall] = []  # applied decisions with a hook whose events are not committed yet
        self._next = 0.0

    @classmethod
    def create(
        cls, kafka: KafkaConfig, layout: TopicLayout, s: ControllerSettings, routed_partitions: int
    ) -> Autoscaler | None:
        if s.scaling == "off":
            return None
        try:
            inputs = partition_count(make_admin(kafka), layout.name("input"))
        except Exception as exc:  # routers may read topics of the user's own: the routed bound it
            log.warning("scaling: partitions of %s not known (%s): routers capped at %d",
                        layout.name("input"), exc, routed_partitions)  # fmt: skip
            inputs = routed_partitions
        return cls(s, inputs, routed_partitions)

    def start(self, state: ControlState) -> None:
        self.loop.decider.counts[REDUCE_STAGE] = state.num_workers
        self._next = time.monotonic() + self.settings.scaling_interval_s

    def observe(self, metric: Any, workers: int) -> None:
        body = metric.body
        if isinstance(body, RouterKeyStats | ReduceProgress | LagSample | WorkerStats):
            self.loop.observe(time.monotonic(), metric.source, metric.interval_start, metric.interval_end,
                              body, workers)  # fmt: skip

    def due(self, now_s: float) -> bool:
        if now_s < self._next:
            return False
        self._next = now_s + self.settings.scaling_interval_s
        return True

    def evaluate(self, now_s: float, state: ControlState, migrating: bool, own: OwnEvent) -> None:
        """One evaluation; its events go to ``own`` (into the controller's next transaction)."""
        ev = self.loop.evaluate(now_s, state, migrating=migrating)
        for etype, body in ev.events:
            event = own(etype, body)
            if etype != "SCALING":
                continue
            log.info("scaling (%s): %s %d -> %d: %s", body["mode"], body["stage"], body["from_instances"],
                     body["to_instances"], body["reason"])  # fmt: skip
            if body["mode"] == "APPLIED" and body["stage"] in self.hooks:
                self._calls.append(HookCall(body["stage"], body["from_instances"], body["to_instances"],
                                            int(event["epoch"])))  # fmt: skip

    def committed(self) -> None:
        """The events of every evaluation so far are in the log (a reduce decision's ``SCALE`` with
        it): their decisions may act."""
        for call in self._calls:
            self.hooks[call.stage].submit(call)
        self._calls = []
        for hook in self.hooks.values():
            hook.poll()

    def status(self) -> ScalingStatus:
        return self.loop.status()

    def close(self) -> None:
        for hook in self.hooks.values():
            hook.close()
