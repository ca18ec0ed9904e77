"""One run of the demo: its own deployment (topic prefix), its services as processes, its status.

Why each run has every service, the hash run included: the hash run's controller runs with
``--no-rebalance`` (it measures and publishes the imbalance, and decides nothing) and its shedder
with ``--dry-run`` (it measures and publishes the time lag, and sheds nothing), so both runs are
observed by the same code and the report compares like with like. The services are started the
way a user starts them (``ballast … run``, through the stack's supervisor, logs in
``<state>/services/<name>/``); the demo only produces input and reads topics.
"""

from __future__ import annotations

import time
from pathlib import Path

from ballast.devstack.services import ServiceCommand
from ballast.devstack.state import StackError
from ballast.harness.pipeline import Pipeline, ServiceFailed
from ballast.kafka.configuration import KafkaConfig
from ballast.kafka.topics import TopicLayout
from ballast.status.snapshot import DeploymentStatus
from ballast.status.watch import StatusWatch
from services.demo.settings import DemoSettings

CYCLE_S = 5.0  # the shedder's policy cycle: no shorter than the micro-batch interval


class DemoRun:
    """``ballast`` (the loop and shedding on) or ``hash`` (both off) on a deployment of its own."""

    def __init__(
        self,
        name: str,
        s: DemoSettings,
        kafka: KafkaConfig,
        folder: Path,
        layout: TopicLayout,
        service_kafka: dict[str, KafkaConfig] | None = None,
    ) -> None:
        """``service_kafka``: each service kind's connection on a secured stack (else ``kafka``'s)."""
        self.name, self.s, self.kafka = name, s, kafka
        self.layout = layout
        self.rebalance = self.shedding = name == "ballast"
        # the control log is signed (docs/security.md): the key is the run's, in the stack folder
        key = folder / "demo-keys" / f"{layout.prefix}.pem"
        key.parent.mkdir(parents=True, exist_ok=True)
        self.pipe = Pipeline(
            kafka, layout, folder, issuer=f"ballast-demo-{name}", signing_key=key, service_kafka=service_kafka
        )
        self.job = f"{layout.prefix}-reduce"
        self.input_topic = layout.name("input")
        self.services: list[str] = []
        self.watch: StatusWatch | None = None
        self.status: DeploymentStatus | None = None
        # (at ms, lowest epoch announced in every routed partition): when the routers applied each
        # control event, which the judge needs to place the end of shedding
        self.markers: list[tuple[int, int]] = []

    def commands(self) -> list[ServiceCommand]:
        """Routers, the controller, the shedder and the reduce, as a user would start them."""
        s, pipe, prefix = self.s, self.pipe, self.layout.prefix
        router = {"stats_interval_s": 1, "heavy_hitters_top": s.tracked_keys, "log_level": "warning"}
        routers = [
            pipe.router(f"{prefix}-router-{i}", name=f"{self.name}-router-{i}", **router)
            for i in range(1, s.routers + 1)
        ]
        loop = (
            {"consecutive": 2, "min_gap": 1, "forecast": False, "pacing": "all-at-once", "step_timeout_s": 60,
             "plan_theta": round(s.theta / 3, 4)}
            if self.rebalance
            else {"rebalance": False}
        )
        controller = pipe.controller(self.name, name=f"{self.name}-controller", interval_s=s.interval_s,
                                     theta=s.theta, pricing="records", status_every_s=1, log_level="warning",
                                     **loop)  # fmt: skip
        stream = f"topic={self.input_topic},target={s.target_s:g}s,priority=0,min-accuracy={s.min_accuracy:g}"
        shedder = pipe.shedder(stream, name=f"{self.name}-shedder", reduce_jobs=self.job, cycle_s=CYCLE_S,
                               dry_run=not self.shedding, log_level="warning")  # fmt: skip
        reduce = pipe.reduce(
            self.job,
            f"aggregate:size={s.window}",
            local_cores=self.layout.workers,
            watermark_delay=s.watermark_delay,
            trigger=s.trigger,
            record_cost_us=s.record_cost_us,
            log_level="ERROR",
        )
        return [*routers, controller, shedder, reduce]

    def start(self) -> None:
        """Start every service without waiting (the routers' and the reduce's start-ups overlap)."""
        for command in self.commands():
            self.pipe.start(command, wait=False)
            self.services.append(command.name)

    def wait_up(self) -> None:
        """Every service ready, and the reduce reading (it has read the routers' first markers)."""
        for name in self.services:
            try:
                self.pipe.wait_ready(name, self.s.ready_timeout_s)
            except StackError as exc:  # said once, with the service and its log, like any failure
                raise ServiceFailed(str(exc), name, self.pipe.service(name).log) from None
        self.pipe.wait_reduce_caught_up(self.job, self.s.ready_timeout_s, watch=self.services)
        self.watch = StatusWatch(self.kafka, self.layout, within_s=30.0)

    def observe(self) -> None:
        """One look while it runs: ``ServiceFailed`` (with its log) for a service that exited, the
        status as published now, and a sample of the epoch every routed partition has announced."""
        self.pipe.check_running(*self.services)
        if self.watch is not None:
            self.status = self.watch.poll(0.05)
        self.markers.append((int(time.time() * 1000), self.pipe.markers().poll()))

    def watermark(self) -> int:
        return max((b.watermark_ms for b in self.pipe.reduce_progress(self.job)), default=0)

    def close(self) -> None:
        """Stop every service of the run (SIGTERM, then SIGKILL) and close every client; safe twice."""
        if self.watch is not None:
            self.watch.close()
            self.watch = None
        self.pipe.close()
