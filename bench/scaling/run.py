"""One policy's run: a fresh deployment, the steps of input, everything watched, the figures.

1. A deployment of its own (prefix ``bench-scaling-<policy>``): one router, the controller (its
   rebalancing loop off; scaling on with the policy, or off for ``fixed-max``), the shedder
   (applied: what it sheds is in the figures) and the reduce (``local[8]``, 8 routed partitions,
   starting on 1 hashed worker, or on all 8 for ``fixed-max``). The input starts once the reduce
   has read the routers' first markers, so Spark's start-up is in no measured lag.
2. The steps (:mod:`ballast.harness.feed`), each ``step_s`` at its multiple of ``unit_rate``. Every
   ``sample_s``: both stages' exact time lag from the broker (:mod:`bench.shed.lag`) and the
   control log (decisions, keep-probabilities).
3. Flush events close every window; the rows are judged against the truth
   (:mod:`ballast.harness.judge`) for the shed windows; :mod:`bench.scaling.figures` sums it up.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from ballast.control.log import ControlLogReader
from ballast.control.state import initial_state
from ballast.harness import judge
from ballast.harness.control_series import keep_at, keep_series
from ballast.harness.events import Events
from ballast.harness.feed import Feeder, Phase, scheduled_records
from ballast.harness.outputs import output_rows
from ballast.harness.pipeline import Pipeline
from ballast.kafka.configuration import KafkaConfig
from ballast.kafka.topics import TopicLayout
from ballast.metrics.records import ControllerStatus
from ballast.workload import closing_flush, flush_now
from bench.reduce.backlog import keyed_events
from bench.scaling import figures
from bench.scaling.params import INPUT_PARTITIONS, STATUS_S, WAIT_S, WORKERS, Params, log
from bench.shed.lag import LagProbe
from spark_jobs.durations import interval_ms

ISSUER = "bench-scaling"
FLUSH_EVERY_S = 5.0


def schedule(p: Params) -> list[Phase]:
    return [Phase(f"{i}:{m}x", float(m) * p.unit_rate, p.step_s) for i, m in enumerate(p.steps.split(","))]


def sequence(p: Params) -> Events:
    return keyed_events(scheduled_records(schedule(p)), p.keys, 0.0, p.seed, 1, 0)


class Deployment:
    def __init__(self, policy: str, p: Params, kafka: KafkaConfig, workdir: Path) -> None:
        self.policy, self.p, self.kafka = policy, p, kafka
        self.layout = TopicLayout(prefix=f"bench-scaling-{policy}", workers=WORKERS,
                                  input_partitions=INPUT_PARTITIONS)  # fmt: skip
        start_workers = WORKERS if policy == "fixed-max" else 1
        self.pipe = Pipeline(kafka, self.layout, workdir / f"pipeline-{policy}", issuer=ISSUER,
                             active_workers=start_workers)  # fmt: skip
        self.job = f"{self.layout.prefix}-reduce"
        self.input_topic = self.layout.name("input")
        self.services: list[str] = []
        self.probe: LagProbe | None = None
        self.log_reader: ControlLogReader | None = None
        self.feeder: Feeder | None = None
        self.events: list[dict[str, Any]] = []
        self.samples: list[dict[str, Any]] = []

    def _start(self, command: Any, wait: bool = True) -> None:
        self.pipe.start(command, wait=wait)
        self.services.append(command.name)

    def up(self) -> None:
        p = self.p
        self._start(self.pipe.router(f"{self.layout.prefix}-router", name="router", stats_interval_s=2,
                                     log_level="warning"))  # fmt: skip
        scaling = "off" if self.policy == "fixed-max" else "on"
        policy = {} if scaling == "off" else {"scaling_policy": self.policy}
        self._start(self.pipe.controller(
            "bench", name="controller", rebalance=False, scaling=scaling,
            scaling_interval_s=p.scaling_interval_s, scaling_warmup=p.scaling_warmup,
            scaling_activation=p.scaling_activation, scale_down_delay_s=p.scale_down_delay_s,
            reduce_trigger_s=p.trigger_s, status_every_s=2, **policy,
        ))  # fmt: skip
        stream = f"topic={self.input_topic},target={p.target_s:g}s,priority=0,min-accuracy={p.min_accuracy:g}"
        self._start(self.pipe.shedder(stream, cycle_s=p.trigger_s, reduce_jobs=self.job,
                                      scaling_hold_s=p.scaling_hold_s))  # fmt: skip
        self._start(
            self.pipe.reduce(self.job, f"aggregate:size={p.window_ms}ms", local_cores=WORKERS,
                             watermark_delay=p.watermark_delay, trigger=f"{p.trigger_s:g} seconds",
                             record_cost_us=p.record_cost_us, record_cost_kind="sleep", log_level="ERROR"),
            wait=False,
        )  # fmt: skip
        self.pipe.wait_reduce_caught_up(self.job, WAIT_S, watch=self.services)
        self.probe = LagProbe(self.kafka, self.pipe.router_group, self.input_topic, INPUT_PARTITIONS,
                              self.layout.name("routed"), WORKERS)  # fmt: skip
        self.log_reader = ControlLogReader(
            self.kafka, self.layout.name("control"), initial_state(WORKERS), start_offset=0
        )
        self.events = self.log_reader.read_to_end()

    def sample(self) -> dict[str, Any]:
        assert self.probe is not None and self.log_reader is not None
        batches = self.pipe.reduce_progress(self.job)
        s = self.probe.sample(batches[-1].end_offsets if batches else [])
        s["phase"] = self.feeder.phase if self.feeder is not None else ""
        s["workers"] = self.workers_now()
        s.update(self.scaling_now())
        self.samples.append(s)
        self.events.extend(self.log_reader.poll(0.0))
        return s

    def workers_now(self) -> int:
        scales = [e["payload"][1]["num_workers"] for e in self.events if e["type"] == "SCALE"]
        snaps = [e["payload"][1]["num_workers"] for e in self.events if e["type"] == "TABLE_SNAPSHOT"]
        return int((scales or snaps or [WORKERS])[-1])

    def scaling_now(self) -> dict[str, float | int | None]:
        """The reduce's true rate per worker and optimal count as the controller last published
        them (none under ``fixed-max``, whose controller does not scale)."""
        statuses = self.pipe.metrics_of(ControllerStatus)
        scaling = statuses[-1].scaling if statuses else None
        if scaling is None:
            return {"true_rate": None, "optimal": None}
        return {"true_rate": scaling.true_rates.get("reduce"), "optimal": scaling.optimal.get("reduce")}

    def close(self) -> None:
        if self.feeder is not None and self.feeder.is_alive():
            self.feeder.stop()
        for c in (self.probe, self.log_reader):
            if c is not None:
                c.close()
        self.pipe.close()


def decisions(events: list[dict[str, Any]], start_ms: int) -> list[figures.Decision]:
    """The applied decisions, in seconds from the input's start."""
    out = []
    for e in events:
        if e["type"] == "SCALING" and e["payload"][1]["mode"] == "APPLIED":
            b = e["payload"][1]
            at = (int(e["issued_at"]) - start_ms) / 1000
            out.append(figures.Decision(at, b["stage"], int(b["from_instances"]), int(b["to_instances"])))
    return out


def run_policy(policy: str, p: Params, kafka: KafkaConfig, workdir: Path, events: Events) -> dict[str, Any]:
    began = time.monotonic()
    d = Deployment(policy, p, kafka, workdir)
    try:
        d.up()
        log(f"{policy}: services up ({time.monotonic() - began:.0f} s)")
        return _drive(d, events, began)
    finally:
        d.close()


def _drive(d: Deployment, events: Events, began: float) -> dict[str, Any]:
    p, policy = d.p, d.policy
    phases = schedule(p)
    d.feeder = Feeder(d.kafka, d.input_topic, events, phases)
    d.feeder.start()
    last_line = time.monotonic()
    while d.feeder.is_alive():
        d.pipe.check_running(*d.services)
        d.feeder.check()
        s = d.sample()
        now = time.monotonic()
        if now - last_line >= STATUS_S:
            last_line = now
            keep = keep_at(keep_series(d.events, d.input_topic), s["at_ms"])
            log(f"{policy}: {s['phase']}, {d.feeder.produced:,} in, {s['workers']} workers, lag router "
                f"{s['router_s']} s + reduce {s['reduce_s']} s, keep {keep:g} "
                f"({now - began:.0f} s)")  # fmt: skip
        time.sleep(max(0.0, p.sample_s - (time.monotonic() - now)))
    produced = d.feeder.stop()
    start_ms = min(d.feeder.phase_starts.values())
    end_s = (d.feeder.ended_ms - start_ms) / 1000
    steps = [
        figures.Step((d.feeder.phase_starts[ph.name] - start_ms) / 1000, 0.0, ph.rate / p.unit_rate)
        for ph in phases
    ]
    steps = [
        figures.Step(s.start_s, nxt.start_s if nxt is not None else end_s, s.times)
        for s, nxt in zip(steps, [*steps[1:], None], strict=True)
    ]
    _close_windows(d, produced, began)
    rows = output_rows(d.pipe.kafka, d.layout.name("output"), d.job)
    expected = judge.truth(d.feeder.produced_events(), p.window_ms)
    keeps = keep_series(d.events, d.input_topic)
    shed_from = next((k["at_ms"] for k in keeps if k["keep"] < 1.0), None)
    lines = judge.judged(rows, expected, shed_from, None, p.window_ms)
    cov = judge.coverage(lines)
    lags = [
        ((s["at_ms"] - start_ms) / 1000, (s["router_s"] or 0.0) + (s["reduce_s"] or 0.0)) for s in d.samples
    ]
    initial = {"reduce": WORKERS if policy == "fixed-max" else 1, "router": 1}
    made = decisions(d.events, start_ms)
    summary = figures.summary(steps, made, initial, lags, p.target_s, end_s, int(cov["shed_windows"]))
    return {
        "policy": policy,
        "events_produced": produced,
        "steps": [s.__dict__ for s in steps],
        "decisions": [x.__dict__ for x in made],
        "summary": {
            **summary,
            "steps": {st: [f.__dict__ for f in figs] for st, figs in summary["steps"].items()},  # type: ignore[union-attr]
        },
        "results": judge.checks(rows, lines, expected),
        "coverage": cov,
        "samples": [{**s, "t_s": (s["at_ms"] - start_ms) / 1000} for s in d.samples],
        "keeps": [{**k, "t_s": (k["at_ms"] - start_ms) / 1000} for k in keeps],
        "run_s": round(time.monotonic() - began, 1),
    }


def _close_windows(d: Deployment, produced: int, began: float) -> None:
    """Flush events until the reduce's watermark passed the last window's end."""
    assert d.feeder is not None
    p = d.p
    last_time = int(d.feeder.times[produced - 1])
    closing, ahead = closing_flush(last_time, p.window_ms, interval_ms(p.watermark_delay))
    started = last_flush = time.monotonic() - FLUSH_EVERY_S
    seq = produced
    while max((b.watermark_ms for b in d.pipe.reduce_progress(d.job)), default=0) < closing:
        d.pipe.check_running(*d.services)
        d.sample()
        now = time.monotonic()
        if now - last_flush >= FLUSH_EVERY_S:
            last_flush = now
            d.pipe.flush(flush_now(last_time, ahead, seq=seq))
            seq += 1
        if now - started > WAIT_S:
            raise TimeoutError(f"{d.policy}: the watermark did not pass {closing} in {WAIT_S:.0f} s")
        time.sleep(p.sample_s)
    log(f"{d.policy}: every window closed ({time.monotonic() - began:.0f} s)")
