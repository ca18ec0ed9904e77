"""One case (shedding on or off): a fresh deployment, the schedule of rates, everything watched.

The order, and why:

1. A deployment of its own (topic prefix ``bench-shed-<case>``): one router, the controller (its
   rebalancing loop off: no key moves to disturb the lag) and, with shedding on, the shedder
   (``ballast shedder run``, one stream: the input topic, with the target, priority and minimum
   accuracy of the parameters); then the reduce (``local[4]``, a per-record cost that sets its
   capacity). The input starts once the job has read the router's first markers, so Spark's
   start-up is in no measured lag.
2. The schedule (:mod:`ballast.harness.feed`): ``warm_s`` at ``calm_rate`` × capacity, ``overload_s`` at
   ``over_rate`` ×, ``recover_s`` at ``calm_rate`` ×. Every ``sample_s`` the benchmark reads both
   stages' exact time lag (:mod:`bench.shed.lag`), the control log (the keep in force) and the
   epoch markers (when the routers applied it).
3. Then the input stops and flush events raise the watermark past every window (one every few
   seconds until it has: a flush record may itself be shed), every output row is read back and
   judged against the truth (:mod:`ballast.harness.judge`), and the verdicts are computed
   (:mod:`bench.shed.verdicts`). Without ``drain_off`` the off case stops after its schedule:
   draining what its overload left takes longer than the schedule, and nothing was shed to judge.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from ballast.control.log import ControlLogReader
from ballast.control.state import initial_state
from ballast.harness import judge
from ballast.harness.control_series import applied_at, keep_at, keep_series
from ballast.harness.events import Events
from ballast.harness.feed import Feeder, Phase, scheduled_records
from ballast.harness.outputs import output_rows
from ballast.harness.pipeline import Pipeline
from ballast.kafka.configuration import KafkaConfig
from ballast.kafka.topics import TopicLayout
from ballast.metrics.records import ReduceProgress
from ballast.workload import closing_flush, flush_now
from bench.reduce.backlog import keyed_events
from bench.shed import verdicts
from bench.shed.lag import LagProbe
from bench.shed.params import INPUT_PARTITIONS, STATUS_S, WAIT_S, WORKERS, Params, log
from spark_jobs.durations import interval_ms

ISSUER = "bench-shed"
FLUSH_EVERY_S = 5.0
SETTLE_S = 5.0  # the first seconds of calm input are the start's, not the steady lag


def sequence(keys: int, z: float, seed: int, phases: list[Phase]) -> Events:
    """The keys and values of every run: as many as the schedule produces (times are filled in as
    produced)."""
    return keyed_events(scheduled_records(phases), keys, z, seed, 1, 0)


def schedule(params: Params, capacity: float) -> list[Phase]:
    return [
        Phase("warm", params.calm_rate * capacity, params.warm_s),
        Phase("overload", params.over_rate * capacity, params.overload_s),
        Phase("recover", params.calm_rate * capacity, params.recover_s),
    ]


def stream_declaration(params: Params, topic: str) -> str:
    return (f"topic={topic},target={params.target_s:g}s,priority={params.priority},"
            f"min-accuracy={params.min_accuracy:g}")  # fmt: skip


class Deployment:
    """A fresh deployment and the services of one case; what it watches while the input runs."""

    def __init__(self, name: str, params: Params, kafka: KafkaConfig, workdir: Path) -> None:
        self.name, self.params, self.kafka = name, params, kafka
        self.layout = TopicLayout(
            prefix=f"bench-shed-{name}", workers=WORKERS, input_partitions=INPUT_PARTITIONS
        )
        self.pipe = Pipeline(kafka, self.layout, workdir / f"pipeline-{name}", issuer=ISSUER)
        self.job = f"{self.layout.prefix}-reduce"
        self.input_topic = self.layout.name("input")
        self.services: list[str] = []
        self.probe: LagProbe | None = None
        self.log_reader: ControlLogReader | None = None
        self.feeder: Feeder | None = None
        self.events: list[dict[str, Any]] = []  # the control log
        self.samples: list[dict[str, Any]] = []  # the exact time lag
        self.markers: list[tuple[int, int]] = []  # (at ms, lowest epoch announced)

    def _start(self, command: Any, wait: bool = True) -> None:
        self.pipe.start(command, wait=wait)
        self.services.append(command.name)

    def up(self, *, controller: bool, shedder: bool) -> None:
        p = self.params
        router = self.pipe.router(f"{self.layout.prefix}-router", name="router",
                                  commit_interval_ms=p.commit_interval_ms, log_level="warning")  # fmt: skip
        self._start(router)
        if controller:
            self._start(self.pipe.controller("bench", name="controller", rebalance=False, forecast=False))
        if shedder:
            self._start(start_shedder(self.pipe, p, self.input_topic, self.job))
        self._start(
            self.pipe.reduce(
                self.job,
                f"aggregate:size={p.window_ms}ms",
                local_cores=WORKERS,
                watermark_delay=p.watermark_delay,
                trigger=p.trigger,
                record_cost_us=p.record_cost_us,
                log_level="ERROR",
            ),
            wait=False,
        )
        self.pipe.wait_reduce_caught_up(self.job, WAIT_S, watch=self.services)
        self.probe = LagProbe(self.kafka, self.pipe.router_group, self.input_topic, INPUT_PARTITIONS,
                              self.layout.name("routed"), WORKERS)  # fmt: skip
        self.log_reader = ControlLogReader(
            self.kafka, self.layout.name("control"), initial_state(WORKERS), start_offset=0
        )
        self.events = self.log_reader.read_to_end()

    def check(self) -> None:
        self.pipe.check_running(*self.services)
        if self.feeder is not None:
            self.feeder.check()

    def progress(self) -> list[ReduceProgress]:
        return self.pipe.reduce_progress(self.job)

    def sample(self) -> dict[str, Any]:
        """One reading of the lag, the log and the markers (kept; the lag sample returned)."""
        assert self.probe is not None and self.log_reader is not None
        batches = self.progress()
        s = self.probe.sample(batches[-1].end_offsets if batches else [])
        s["phase"] = self.feeder.phase if self.feeder is not None else ""
        self.samples.append(s)
        self.events.extend(self.log_reader.poll(0.0))
        self.markers.append((int(time.time() * 1000), self.pipe.markers().poll()))
        return s

    def keeps(self) -> list[dict[str, Any]]:
        return keep_series(self.events, self.input_topic)

    def watermark(self) -> int:
        return max((b.watermark_ms for b in self.progress()), default=0)

    def close(self) -> None:
        if self.feeder is not None and self.feeder.is_alive():
            self.feeder.stop()
        for c in (self.probe, self.log_reader):
            if c is not None:
                c.close()
        self.probe = self.log_reader = None
        self.pipe.close()


def start_shedder(pipe: Pipeline, params: Params, topic: str, job: str) -> Any:
    """The shedder's command: the one place that knows its flags (``ballast shedder run -h``)."""
    return pipe.shedder(stream_declaration(params, topic), cycle_s=params.cycle_s, reduce_jobs=job)


def run_case(name: str, params: Params, kafka: KafkaConfig, workdir: Path, events: Events,
             capacity: float) -> dict[str, Any]:  # fmt: skip
    """One case from a fresh deployment to its figures and verdicts (see the module docstring)."""
    began = time.monotonic()
    d = Deployment(name, params, kafka, workdir)
    try:
        d.up(controller=True, shedder=name == "on")
        log(f"{name}: services up ({time.monotonic() - began:.0f} s)")
        return _drive(d, events, capacity, began)
    finally:
        d.close()


def _drive(d: Deployment, events: Events, capacity: float, began: float) -> dict[str, Any]:
    p, name = d.params, d.name
    phases = schedule(p, capacity)
    d.feeder = Feeder(d.kafka, d.input_topic, events, phases)
    d.feeder.start()
    last_line = time.monotonic()
    while d.feeder.is_alive():
        d.check()
        s = d.sample()
        now = time.monotonic()
        if now - last_line >= STATUS_S:
            last_line = now
            keep = keep_at(d.keeps(), s["at_ms"])
            log(f"{name}: {s['phase']}, {d.feeder.produced:,} in, lag router {s['router_s']} s + reduce "
                f"{s['reduce_s']} s ({s['reduce_records']:,} records), keep {keep:g} "
                f"({now - began:.0f} s)")  # fmt: skip
        time.sleep(max(0.0, p.sample_s - (time.monotonic() - now)))
    produced = d.feeder.stop()
    starts = dict(d.feeder.phase_starts)
    feed_end_ms = d.feeder.ended_ms
    overload = (starts["overload"], starts["recover"])
    result: dict[str, Any] = {
        "case": name,
        "shedding": name == "on",
        "capacity": round(capacity, 1),
        "rates": {ph.name: round(ph.rate, 1) for ph in phases},
        "phase_starts_ms": starts,
        "feed_end_ms": feed_end_ms,
        "events_produced": produced,
        "feeder_behind_s": round(d.feeder.behind_s, 2),
    }
    # the lag with calm input, once the start is behind (the warm phase): the target is to be twice it
    result["calm_lag"] = verdicts.lag_summary(d.samples, starts["warm"] + int(SETTLE_S * 1000), overload[0])
    judged = name == "on" or p.drain_off
    if judged:
        _close_windows(d, produced, began)
    keeps = d.keeps()
    lag = verdicts.pipeline_lag(d.samples)
    result["verdicts"] = {
        "lag": verdicts.lag_on(lag, p.target_s, p.cycle_s, p.cycles, overload)
        if name == "on"
        else verdicts.lag_off(lag, p.target_s, p.min_growth, overload)
    }
    lift = verdicts.lifting(keeps, overload[1], p.cycle_s, p.cycles, overload[0])
    if name == "on":
        result["verdicts"]["lifting"] = lift
    if judged:
        result |= _judge(d, events, produced, keeps, lift, overload)
    result |= {
        "lag_samples": d.samples,
        "keeps": keeps,
        "reduce_batches": [
            {
                "id": b.batch_id,
                "rows": b.input_rows,
                "ms": int(b.durations_ms.get("triggerExecution", 0)),
                "watermark_ms": b.watermark_ms,
            }
            for b in d.progress()
        ],
        "run_s": round(time.monotonic() - began, 1),
        "load_average": [round(x, 2) for x in os.getloadavg()],  # the shared machine's, at the end
    }
    log(f"{name}: {verdict_line(result)}")
    return result


def _close_windows(d: Deployment, produced: int, began: float) -> None:
    """Flush events until the reduce's watermark passed the last window's end (all written)."""
    assert d.feeder is not None
    p = d.params
    last_time = int(d.feeder.times[produced - 1])
    closing, ahead = closing_flush(last_time, p.window_ms, interval_ms(p.watermark_delay))
    started = last_flush = last_line = time.monotonic() - FLUSH_EVERY_S
    seq = produced
    while d.watermark() < closing:
        d.check()
        d.sample()
        now = time.monotonic()
        if now - last_flush >= FLUSH_EVERY_S:
            last_flush = now
            d.pipe.flush(flush_now(last_time, ahead, seq=seq))  # every partition, never ahead of the clock
            seq += 1
        if now - last_line >= STATUS_S:
            last_line = now
            s = d.samples[-1]
            log(f"{d.name}: closing the last windows: reduce lag {s['reduce_s']} s, "
                f"{s['reduce_records']:,} records to read ({now - began:.0f} s)")  # fmt: skip
        if now - started > WAIT_S:
            raise TimeoutError(f"{d.name}: the watermark did not pass {closing} in {WAIT_S:.0f} s")
        time.sleep(d.params.sample_s)
    log(f"{d.name}: every window closed ({time.monotonic() - began:.0f} s)")


def _judge(d: Deployment, events: Events, produced: int, keeps: list[dict[str, Any]],
           lift: dict[str, Any], overload: tuple[int, int]) -> dict[str, Any]:  # fmt: skip
    """Every row read back against the truth of what was produced; the shedding span (for windows
    without a row) runs from the first shed to when the routers applied the lift, or to the end."""
    p = d.params
    assert d.feeder is not None
    rows = output_rows(d.pipe.kafka, d.layout.name("output"), d.job)
    expected = judge.truth(d.feeder.produced_events(), p.window_ms)
    shed_from = next((k["at_ms"] for k in keeps if k["keep"] < 1.0), None)
    applied = None if lift["lifted_epoch"] is None else applied_at(lift["lifted_epoch"], d.markers)
    lines = judge.judged(rows, expected, shed_from, applied, p.window_ms)
    cov = judge.coverage(lines)
    out: dict[str, Any] = {
        "results": judge.checks(rows, lines, expected),
        "coverage": cov,
        "error_over_time": judge.over_time(lines),
    }
    out["verdicts_results"] = {"coverage": verdicts.covered(cov)}
    if d.name == "on":
        out["verdicts_results"]["exact_again"] = verdicts.exact_again(
            judge.first_exact_start(lines), applied, p.window_ms, overload[1]
        )
    return out


def verdict_line(r: dict[str, Any]) -> str:
    v = r["verdicts"]["lag"]
    parts = []
    if "back_under_target" in v:
        parts.append(f"lag peak {v['peak_lag_s']} s, longest over target {v['longest_over_target_s']} s "
                     f"(bound {v['bound_s']} s): {'PASS' if v['back_under_target'] else 'FAIL'}")  # fmt: skip
    else:
        parts.append(f"lag grew {v['growth_s_per_s']} s/s to {v['end_lag_s']} s: "
                     f"{'PASS' if v['grows_without_bound'] else 'FAIL'}")  # fmt: skip
    lift = r["verdicts"].get("lifting")
    if lift:
        parts.append(f"lowest keep {lift['lowest_keep']}, lifted {lift['lifted_after_overload_s']} s after "
                     f"the overload: {'PASS' if lift['lifted_in_time'] else 'FAIL'}")  # fmt: skip
    if "coverage" in r:
        c = r["coverage"]
        parts.append(
            f"coverage count {c['count']} sum {c['sum']} over {c['shed_windows']} shed windows "
            f"({c['no_estimate']} said no estimate, {c['no_estimate_over']} of them over the truth)"
        )
        res = r["results"]
        parts.append(
            f"{res['rows']:,} rows, exact wrong {res['exact_wrong']}, missing {res['missing_unshed']}"
        )
    again = r.get("verdicts_results", {}).get("exact_again")
    if again:
        parts.append(f"exact again from {again['first_exact_after_overload_s']} s after the overload: "
                     f"{'PASS' if again['exact_again'] else 'FAIL'}")  # fmt: skip
    return "; ".join(parts)
