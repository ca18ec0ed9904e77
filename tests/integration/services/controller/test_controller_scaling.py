"""DS2 scaling in the controller process, on a real broker: a router measures its useful time, the
controller reads it with the reduce's batches and the shedder's lag from the metrics topic,
decides, writes ``SCALING`` (and the reduce's ``SCALE``) into the control log, runs the router
hook once the decision is committed, and shows it all in its status. The log alone replays to
the counts the controller reports.

The reduce's batches and the lag samples are published here as the reduce and the shedder
publish them (the same records through the same codec), with numbers chosen so the expected
counts are worked out by hand: 3,000 records/s arrive; a router carries 2,000/s per useful second
(5,000 records in 2.5 useful s of each 5 s interval): 2 routers; a reduce worker carries
(2 - 0.5) / (0.001 × 2) = 750/s at a 2 s trigger: 4 workers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from ballast.avro.codec import AvroCodec
from ballast.control.log import ControlLogReader
from ballast.control.state import initial_state
from ballast.harness.pipeline import Pipeline
from ballast.kafka.clients import make_producer
from ballast.kafka.topics import TopicLayout
from ballast.metrics.reader import MetricsReader
from ballast.metrics.records import ControllerStatus, RouterKeyStats, metrics_record
from ballast.waiting import wait_until
from ballast.workload import input_events
from services.controller.scaling.replay import replay

ROUTED, INPUT_PARTITIONS = 8, 4


@pytest.fixture
def deployment(kafka_config, unique, tmp_path):
    layout = TopicLayout(prefix=unique("scale"), workers=ROUTED, input_partitions=INPUT_PARTITIONS)
    pipe = Pipeline(kafka_config, layout, tmp_path / "stack", issuer="scaling-tests", active_workers=1)
    try:
        yield pipe
    finally:
        pipe.close()


def control_events(pipe: Pipeline) -> list[dict]:
    reader = ControlLogReader(pipe.kafka, pipe.layout.name("control"), initial_state(ROUTED), start_offset=0)
    try:
        events = reader.read_to_end(60)
        assert not reader.skipped, dict(reader.skipped)
        return events
    finally:
        reader.close()


class Publisher:
    """Metrics as the routers, the reduce and the shedder publish them."""

    def __init__(self, pipe: Pipeline) -> None:
        self.producer = make_producer(pipe.kafka)
        self.codec = AvroCodec("io.ballast.MetricsRecord")
        self.topic = pipe.layout.name("metrics")
        self.batch_id = 0

    def send(self, source: str, start: int, end: int, branch: str, body: dict) -> None:
        record = metrics_record(source, start, end, branch, body)
        self.producer.produce(self.topic, self.codec.encode(record), source.encode())

    def round(self, workers: int) -> None:
        now = int(time.time() * 1000)
        self.send("router/r1", now - 5000, now, "RouterKeyStats", {
            "epoch": 0, "first_epoch": 0, "worker_records": [5000] + [0] * (ROUTED - 1),
            "worker_bytes": [0] * ROUTED, "offered_records": 5000, "kept_records": 5000, "dead_lettered": 0,
            "heavy_hitters": [], "sketch_capacity": 10, "sketch_records": 0, "useful_ms": 2500,
        })  # fmt: skip
        for rows in (1000, 2500, 4000, 5500, 7000):
            self.batch_id += 1
            ms = round((0.5 + rows * 0.001 / workers) * 1000)
            self.send("reduce/j", now - ms, now, "ReduceProgress", {
                "job": "j", "batch_id": self.batch_id, "input_rows": rows,
                "durations_ms": {"triggerExecution": ms}, "end_offsets": [],
            })  # fmt: skip
        self.send("shedder", now, now, "LagSample", {
            "group": "g", "topic": "in", "partition": 0, "committed_offset": 0, "end_offset": 0,
            "lag_records": 0, "lag_seconds": 0.0, "stage": "router", "arrival_rate": 3000.0,
        })  # fmt: skip
        self.producer.flush(10)


def stack_routers(stack_dir: str) -> dict[str, bool]:
    status = json.loads(ballast("stack", "status", "--json", "--state-dir", stack_dir).stdout)
    return {s["name"]: s["running"] for s in status["services"] if s["name"].startswith("router-")}


def ballast(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BALLAST_")}
    return subprocess.run([sys.executable, "-m", "ballast.cli", *args], capture_output=True, text=True,
                          timeout=300, env=env)  # fmt: skip


def test_the_controller_scales_from_measured_rates_and_the_log_replays_it(deployment, kafka_stack, tmp_path):
    """The router hook is the local stack's actuator (``ballast stack scale-routers``): the applied
    router decision starts a second router process in the session's stack."""
    pipe = deployment
    hook_log = tmp_path / "hook.log"
    stack_dir = str(kafka_stack.state_dir)
    scale = (f"{sys.executable} -m ballast.cli stack scale-routers --state-dir {stack_dir} "
             f"--prefix {pipe.layout.prefix} --workers {ROUTED} "
             f"--input-partitions {INPUT_PARTITIONS}")  # fmt: skip
    record = f"env | grep ^BALLAST_SCALING_ | sort >> {hook_log}"
    hook = f"{record} && {scale} $BALLAST_SCALING_TO >> {hook_log} 2>&1"
    pipe.start(pipe.controller(
        "c1", rebalance=False, scaling="on", scaling_interval_s=1.0, scaling_warmup=1, scaling_activation=2,
        reduce_trigger_s=2.0, router_hook=hook, status_every_s=0.5,
    ))  # fmt: skip
    try:
        scaled_by_the_controller(pipe, hook_log, stack_dir)
    finally:
        down = ballast(*scale.split()[3:], "0")
        assert down.returncode == 0, down.stdout + down.stderr
    assert not any(stack_routers(stack_dir).values())


def scaled_by_the_controller(pipe: Pipeline, hook_log, stack_dir: str) -> None:
    pub = Publisher(pipe)

    def scaled() -> bool:
        pub.round(workers=1)
        events = control_events(pipe)
        routers = [e for e in events if e["type"] == "SCALING" and e["payload"][1]["stage"] == "router"]
        return bool(routers) and any(e["type"] == "SCALE" for e in events)

    wait_until(scaled, timeout=90, interval=1.0, what="a SCALE and a router decision from the scaling loop")
    events = control_events(pipe)
    decisions = [e["payload"][1] for e in events if e["type"] == "SCALING"]
    assert {(d["stage"], d["from_instances"], d["to_instances"], d["mode"]) for d in decisions} == {
        ("router", 1, 2, "APPLIED"), ("reduce", 1, 4, "APPLIED")}  # fmt: skip
    reduce_decision = next(d for d in decisions if d["stage"] == "reduce")
    assert reduce_decision["true_rate_per_instance"] == pytest.approx(750, rel=0.02)
    assert reduce_decision["inputs"]["arrival_rate"] == pytest.approx(3000)
    scale_at = next(i for i, e in enumerate(events) if e["type"] == "SCALE")
    assert events[scale_at - 1]["type"] == "SCALING" and events[scale_at]["payload"][1]["num_workers"] == 4
    assert replay(events, {"router": 1, "reduce": 1}).counts == {"router": 2, "reduce": 4}

    # the hook ran once the decision was in the log, with the decision in its environment, and the
    # stack runs the two routers it asked for
    def said() -> str:
        return hook_log.read_text() if hook_log.exists() else ""

    wait_until(lambda: "routers: 2 running" in said(), 120, "the router hook's run", describe=said)
    assert stack_routers(stack_dir) == {"router-1": True, "router-2": True}
    lines = hook_log.read_text().split()
    assert "BALLAST_SCALING_STAGE=router" in lines and "BALLAST_SCALING_FROM=1" in lines
    router_epoch = next(e["epoch"] for e in events if e["type"] == "SCALING"
                        and e["payload"][1]["stage"] == "router")  # fmt: skip
    assert f"BALLAST_SCALING_EPOCH={router_epoch}" in lines

    # the status says the same as the log
    reader = MetricsReader.since(pipe.kafka, pipe.layout.name("metrics"), 60)
    try:
        def status_scaled() -> ControllerStatus | None:
            pub.round(workers=4)  # the load goes on: the rates stay measured
            reader.poll(1.0)
            found = [
                b for _, b in reader.of(ControllerStatus)
                if b.scaling and b.scaling.instances.get("reduce") == 4 and "router" in b.scaling.true_rates
            ]  # fmt: skip
            return found[-1] if found else None

        status = wait_until(status_scaled, timeout=30, what="a status with the new counts")
    finally:
        reader.close()
    assert status.scaling.mode == "on" and status.scaling.instances == {"router": 2, "reduce": 4}
    assert status.scaling.true_rates["router"] == pytest.approx(2000, rel=0.02)
    assert "reduce 1 -> 4" in status.scaling.last_decision or "router 1 -> 2" in status.scaling.last_decision


def test_a_router_reports_its_useful_time(deployment):
    """Useful time is the routing alone: over a backlog of 40,000 records it is positive and below
    the intervals' span; with no input the router reports no interval at all (nothing to say)."""
    pipe = deployment
    pipe.start(pipe.router("r1", stats_interval_s=1.0, log_level="warning"))
    producer = make_producer(pipe.kafka)
    codec = AvroCodec("io.ballast.InputEvent")
    for i, event in enumerate(input_events(40_000, num_keys=500, seed=5)):
        producer.produce(pipe.layout.name("input"), codec.encode(event), event["key"].encode())
        if i % 5000 == 0:
            producer.poll(0)
    producer.flush(30)
    reader = MetricsReader.since(pipe.kafka, pipe.layout.name("metrics"), 120)
    try:
        def all_counted() -> bool:
            reader.poll(1.0)
            return sum(b.offered_records for _, b in reader.of(RouterKeyStats)) >= 40_000

        wait_until(all_counted, timeout=120, what="40,000 records in the router's statistics")
        reports = [(m, b) for m, b in reader.of(RouterKeyStats) if b.offered_records]
    finally:
        reader.close()
    assert all(b.useful_ms is not None for _, b in reports)
    useful = sum(b.useful_ms for _, b in reports)
    span = sum(m.interval_end - m.interval_start for m, _ in reports)
    assert 0 < useful < span, (useful, span)
