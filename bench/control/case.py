"""One case: a fresh deployment, its routers as processes, a load (or none), and the events timed.

Why a fresh deployment per case: the control log, the routed topic and the group start empty, so
a case measures neither the table the previous one built nor its routers' leftovers.
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

from ballast.control.state import initial_state, routing_update
from ballast.control.writer import ControlLogWriter
from ballast.deployment.create import create_deployment
from ballast.harness.pipeline import Pipeline
from ballast.kafka.admin import make_admin
from ballast.kafka.configuration import KafkaConfig
from ballast.kafka.topics import TopicLayout, TopicSpec
from ballast.workload import key_name
from bench.control.group import members, wait_settled
from bench.control.load import SteadyLoad
from bench.control.params import APPEND_TIME, INPUT_PARTITIONS, WAIT_S, WORKERS, Params, log
from bench.control.report import brief, summary
from bench.control.watch import VisibilityWatch

SETTLE_S = 3.0  # after the group is stable and the load runs: the routers' first commits are behind them


@dataclass
class CaseResult:
    routers: int
    load: str
    rate: float
    samples: list[dict[str, float]] = field(default_factory=list)
    records_produced: int = 0
    membership_unchanged: bool = True
    load_average: tuple[float, float] = (0.0, 0.0)  # 1-minute load average at the start and the end
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "routers": self.routers,
            "load": self.load,
            "rate_per_s": self.rate,
            "events": len(self.samples),
            "latency_ms": summary([s["total"] for s in self.samples]),
            "split_ms": {
                part: summary([s[part] for s in self.samples]) for part in ("control", "router", "commit")
            },
            "records_produced": self.records_produced,
            "membership_unchanged": self.membership_unchanged,
            "load_average_1m": list(self.load_average),
            "seconds": round(self.seconds, 1),
            "samples": self.samples,
        }


def deployment(kafka: KafkaConfig, prefix: str) -> TopicLayout:
    """Topics and genesis; the control and routed topics stamp the broker's append time."""
    layout = TopicLayout(prefix=prefix, workers=WORKERS, input_partitions=INPUT_PARTITIONS)
    specs = layout.specs()
    for role in ("control", "routed"):
        spec = specs[role]
        specs[role] = TopicSpec(role, spec.name, spec.partitions, {**spec.config, **APPEND_TIME})
    create_deployment(kafka, layout, specs=specs, issuer="bench-control")
    return layout


def run_case(kafka: KafkaConfig, params: Params, routers: int, load: str) -> CaseResult:
    rate = params.rate if load == "steady" else 0.0
    result = CaseResult(routers, load, rate, load_average=(os.getloadavg()[0], 0.0))
    started = time.monotonic()
    layout = deployment(kafka, f"ctl-{routers}r-{load}")
    folder = tempfile.mkdtemp(prefix="ballast-bench-control-")
    watch = VisibilityWatch(kafka, layout, INPUT_PARTITIONS)
    pipe = Pipeline(kafka, layout, folder, create=False)
    writer: ControlLogWriter | None = None
    steady: SteadyLoad | None = None
    try:
        for i in range(routers):
            pipe.start(pipe.router(f"r{i}", exactly_once=params.exactly_once), timeout=WAIT_S)
        admin = make_admin(kafka)
        before = wait_settled(admin, pipe.router_group, routers, WAIT_S)
        watch.wait_visible(0, WAIT_S)
        if rate:
            steady = SteadyLoad(kafka.bootstrap_servers, layout.name("input"), rate)
        time.sleep(SETTLE_S)
        log(f"{routers} router(s), {load}: group settled, {len(before)} members; sending events")
        writer = ControlLogWriter(
            kafka, layout.name("control"), initial_state(WORKERS), issuer="bench-control"
        )
        rng = random.Random(params.seed)
        total = params.warmup + params.events
        for i in range(total):
            event = writer.send(*routing_update({key_name(i): i % WORKERS}, reason="bench-control"))
            times = watch.wait_visible(int(event["epoch"]), WAIT_S)
            if i >= params.warmup:
                result.samples.append(times.sample())
                done = len(result.samples)
                if done % 50 == 0 or done == params.events:
                    so_far = summary([x["total"] for x in result.samples])
                    log(f"  {done}/{params.events} events: {brief(so_far)}")
            if steady is not None:
                steady.check()
            pipe.check_running()
            time.sleep(rng.uniform(params.gap_min_ms, params.gap_max_ms) / 1000)
        result.membership_unchanged = members(admin, pipe.router_group) == before
    finally:
        if steady is not None:
            result.records_produced = steady.stop()
        if writer is not None:
            writer.close()
        pipe.close()
        watch.close()
        shutil.rmtree(folder, ignore_errors=True)
    result.load_average = (result.load_average[0], os.getloadavg()[0])
    result.seconds = time.monotonic() - started
    return result
