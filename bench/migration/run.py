"""One pacing mode's run: a fresh deployment, the stream, one rebalance, its migration watched.

The order, and why:

1. A deployment of its own (topic prefix ``bench-mig-<mode>``), a router (``ballast router run``,
   statistics every ``stats_interval_s``) and the controller (``ballast controller run --pacing
   <mode> --no-rebalance --no-forecast``), as processes. The loop is off so the one migration is
   the one the benchmark asks for, at the same point of the input in every run; no forecast, so
   the plan is made from the last interval's load (a forecast after so few intervals treats every
   key as rising from zero).
2. The stale table (:func:`bench.migration.stream.stale_pins`) as one routing update request,
   before any input: those keys build their state at the pinned workers from the first event.
3. The reduce job (``ballast reduce run``, ``local[8]``); the input starts once the job has read
   the router's first markers, so Spark's start-up is not in any measured batch.
4. ``steady_s`` of input, then a ``REBALANCE`` request (``dry_run`` false): the controller plans
   from its last interval and starts a paced migration (``no-load`` answers, before the first
   interval, are retried). The log is read as it grows: every step is printed as it is sent.
5. ``tail_s`` of input after DONE (or ABORT), then the input stops and one flush event raises the
   watermark past every window, so every window of the prefix produced is written and checked.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from ballast.control.log import ControlLogReader
from ballast.control.requests import ControlClient
from ballast.control.state import initial_state
from ballast.devstack.services import service_dir
from ballast.harness.events import Events
from ballast.harness.pipeline import Pipeline
from ballast.kafka.configuration import KafkaConfig
from ballast.kafka.topics import TopicLayout
from ballast.metrics.records import ReduceProgress, WorkerStats
from ballast.workload import closing_flush, flush_event
from bench.migration.figures import batch_rows, mode_figures
from bench.migration.params import INPUT_PARTITIONS, STATUS_S, WAIT_S, WORKERS, Params, log
from bench.migration.story import migration_story
from bench.migration.stream import Feeder
from bench.reduce.backlog import reference
from bench.reduce.check import closed_reference, compare, equal
from bench.reduce.cpu import CpuSampler
from bench.reduce.runs import read_results
from bench.reduce.soak import delay_ms

ISSUER = "bench-migration"
START_WAIT_S = 30.0  # an accepted rebalance whose START is not in the log by then changed nothing


def progress_rows(pipe: Pipeline, job: str) -> list[dict[str, Any]]:
    return [
        {
            "id": p.batch_id,
            "start_ms": m.interval_start,
            "duration_ms": int(p.durations_ms.get("triggerExecution", 0)),
            "rows": p.input_rows,
            "watermark_ms": p.watermark_ms,
        }
        for m, p in pipe.metrics().of(ReduceProgress, source=f"{job}/driver")
    ]


def worker_samples(pipe: Pipeline, job: str) -> list[dict[str, Any]]:
    return [
        {
            "at_ms": m.interval_end,
            "worker": s.worker,
            "records": s.records,
            "busy_ms": s.busy_ms,
            "pending_keys": s.pending_keys,
            "held_records": s.held_records,
            "state_bytes": s.state_bytes,
            "state_keys": s.state_keys,
            "chunks_sent": [{"key": c.key, "epoch": c.epoch, "bytes": c.bytes} for c in s.chunks_sent],
            "chunks_installed": [
                {"key": c.key, "epoch": c.epoch, "bytes": c.bytes} for c in s.chunks_installed
            ],
        }
        for m, s in pipe.metrics().of(WorkerStats, prefix=f"{job}/")
    ]


class ModeRun:
    """The deployment and services of one mode (see the module docstring)."""

    def __init__(self, mode: str, params: Params, kafka: KafkaConfig, workdir: Path) -> None:
        self.mode, self.params, self.kafka = mode, params, kafka
        self.layout = TopicLayout(
            prefix=f"bench-mig-{mode}", workers=WORKERS, input_partitions=INPUT_PARTITIONS
        )
        self.pipe = Pipeline(kafka, self.layout, workdir / f"pipeline-{mode}", issuer=ISSUER)
        self.job = f"{self.layout.prefix}-reduce"
        self.services: list[str] = []
        self.client: ControlClient | None = None
        self.log_reader: ControlLogReader | None = None
        self.feeder: Feeder | None = None
        self.events: list[dict[str, Any]] = []
        # the job's processes: the driver's command line names its service folder, the rest descend
        self.cpu = CpuSampler(str(service_dir(self.pipe.state, self.pipe.reduce_name(self.job))))

    def _start(self, command: Any, wait: bool = True) -> None:
        self.pipe.start(command, wait=wait)
        self.services.append(command.name)

    def check(self) -> None:
        self.pipe.check_running(*self.services)
        if self.feeder is not None:
            self.feeder.check()

    def up(self, pins: dict[str, int]) -> int:
        """Router, controller, the stale table, the job; the epoch of the pins."""
        p = self.params
        self._start(
            self.pipe.router(
                f"{self.layout.prefix}-router",
                name="router",
                stats_interval_s=p.stats_interval_s,
                heavy_hitters_top=p.heavy_hitters,
                log_level="warning",
            )
        )
        self._start(
            self.pipe.controller(
                "bench",
                name="controller",
                rebalance=False,
                forecast=False,
                interval_s=p.interval_s,
                plan_theta=p.plan_theta,
                pacing=self.mode,
                step_keys=p.step_keys,
                step_timeout_s=p.step_timeout_s,
            )
        )
        self.client = ControlClient(self.kafka, self.layout, ISSUER)
        answer = self.client.request(
            "ROUTING_UPDATE",
            {"assign": pins, "unassign": [], "reason": "bench-migration: the table of an earlier hot set"},
            timeout=60,
        )
        if not answer.accepted:
            raise RuntimeError(f"the stale table was refused: {answer.reason} {answer.detail}")
        self.log_reader = ControlLogReader(
            self.kafka, self.layout.name("control"), initial_state(WORKERS), start_offset=0
        )
        self.events = self.log_reader.read_to_end()
        self.cpu.start()
        self._start(
            self.pipe.reduce(
                self.job,
                p.processor,
                local_cores=WORKERS,
                watermark_delay=p.watermark_delay,
                trigger=p.trigger,
                record_cost_us=p.record_cost_us,
                log_level="ERROR",
            ),
            wait=False,
        )
        self.pipe.wait_epoch(answer.epoch, WAIT_S)
        self.pipe.wait_reduce_caught_up(self.job, WAIT_S, watch=self.services)
        return answer.epoch

    def rebalance(self) -> dict[str, Any]:
        """Ask for a rebalance now; the answer (``no-load`` retried until an interval was folded)."""
        assert self.client is not None
        deadline = time.monotonic() + 3 * self.params.interval_s + 30
        while True:
            answer = self.client.request("REBALANCE", {"dry_run": False}, timeout=60)
            if answer.accepted:
                return {"epoch": answer.epoch, "at_ms": answer.answered_at, "detail": answer.detail}
            if answer.reason != "no-load" or time.monotonic() > deadline:
                raise RuntimeError(f"rebalance refused: {answer.reason} ({answer.detail})")
            time.sleep(1.0)

    def poll_log(self) -> None:
        assert self.log_reader is not None
        self.events.extend(self.log_reader.poll(0.0))

    def close(self) -> None:
        if self.cpu.is_alive():
            self.cpu.stop()
        if self.feeder is not None and self.feeder.is_alive():
            self.feeder.stop()
        for c in (self.client, self.log_reader):
            if c is not None:
                c.close()
        self.client = self.log_reader = None
        self.pipe.close()


def run_mode(mode: str, params: Params, kafka: KafkaConfig, workdir: Path, events: Events,
             pins: dict[str, int]) -> dict[str, Any]:  # fmt: skip
    """One mode from a fresh deployment to its figures and its check (see the module docstring)."""
    began = time.monotonic()
    r = ModeRun(mode, params, kafka, workdir)
    try:
        pins_epoch = r.up(pins)
        log(
            f"{mode}: job up, {len(pins)} stale pins at epoch {pins_epoch} ({time.monotonic() - began:.0f} s)"
        )
        return _drive(r, params, events, pins_epoch, began)
    finally:
        r.close()


def _drive(r: ModeRun, params: Params, events: Events, pins_epoch: int, began: float) -> dict[str, Any]:
    mode, pipe = r.mode, r.pipe
    r.feeder = Feeder(r.kafka, r.layout.name("input"), events, params.rate)
    r.feeder.start()
    t0 = time.monotonic()
    phase, asked, tail_until = "steady", None, 0.0
    story: dict[str, Any] | None = None
    steps_seen, last_line = 0, t0
    while True:
        r.check()
        r.poll_log()
        now = time.monotonic()
        if phase == "steady" and now - t0 >= params.steady_s:
            asked = r.rebalance()
            phase = "migrating"
            log(f"{mode}: rebalance asked at {now - t0:.0f} s of input: {_plan_line(asked['detail'])}")
        elif phase == "migrating":
            story = migration_story(r.events, pins_epoch)
            if story is None and now - t0 - params.steady_s > START_WAIT_S:
                raise RuntimeError(f"{mode}: the rebalance started no migration (plan: {asked})")
            if story is not None:
                steps = story["steps"]
                for s in steps[steps_seen:]:
                    if len(steps) <= 12 or s["index"] % 5 == 0 or story["end_phase"]:
                        log(f"{mode}: step {s['index'] + 1} sent, epoch {s['epoch']}, {len(s['keys'])} keys, "
                            f"{(s['at_ms'] - story['start_ms']) / 1000:.1f} s after START")  # fmt: skip
                steps_seen = len(steps)
                if story["end_phase"]:
                    took = (story["end_ms"] - story["start_ms"]) / 1000
                    what = f"{story['keys']} keys in {len(steps)} steps"
                    log(f"{mode}: {story['end_phase']}: {what}, {took:.1f} s")
                    phase, tail_until = "tail", now + params.tail_s
        elif phase == "tail" and now >= tail_until:
            break
        if now - last_line >= STATUS_S:
            last_line = now
            pipe.metrics().poll(0.2)
            batches = progress_rows(pipe, r.job)
            last = batches[-1]["duration_ms"] / 1000 if batches else float("nan")
            log(f"{mode}: {phase}, {r.feeder.produced:,} events in, {len(batches)} batches "
                f"(last {last:.1f} s), {steps_seen} steps sent ({now - began:.0f} s)")  # fmt: skip
        if now - t0 > params.max_input_s - 1:
            raise RuntimeError(f"{mode}: input ran out before the run ended (phase {phase})")
        time.sleep(0.2)
    feed_start_ms = r.feeder.started_ms
    produced = r.feeder.stop()
    feed_end_ms = int(time.time() * 1000)
    assert story is not None and asked is not None
    last_time = int(events.times[produced - 1])
    closing, ahead = closing_flush(last_time, params.window_ms, delay_ms(params.watermark_delay))
    pipe.flush(flush_event(last_time, seq=produced, ahead_ms=ahead))  # into every input partition
    _wait_closed(r, closing)
    log(f"{mode}: every window closed; stopping ({time.monotonic() - began:.0f} s)")
    pipe.stop(pipe.reduce_name(r.job), timeout=120)
    r.cpu.stop()
    pipe.metrics().read_to_end(120)
    r.events.extend(r.log_reader.read_to_end() if r.log_reader is not None else [])
    story = migration_story(r.events, pins_epoch)
    assert story is not None
    progress = progress_rows(pipe, r.job)
    samples = worker_samples(pipe, r.job)
    rows = batch_rows(progress, samples)
    for b in rows:
        b["cpu_s"] = round(sum(r.cpu.between(b["start_ms"], b["start_ms"] + b["duration_ms"]).values()), 2)
    figures = mode_figures(rows, story, samples, feed_start_ms, feed_end_ms, params.settle_s)
    check = _check(r, events, produced, params.window_ms)
    log(f"{mode}: {_figure_line(figures)}; windows {'exact' if check['exact'] else check}")
    return {
        "mode": mode,
        "figures": figures,
        "check": check,
        "rebalance": {**asked, "detail": _detail(asked["detail"])},
        "migration": story,
        "events_produced": produced,
        "feed_start_ms": feed_start_ms,
        "feed_end_ms": feed_end_ms,
        "feeder_behind_s": round(r.feeder.behind_s, 2),
        "batches": rows,
        "run_s": round(time.monotonic() - began, 1),
        "load_average": [round(x, 2) for x in os.getloadavg()],  # the shared machine's, at the end
    }


def _wait_closed(r: ModeRun, closing: int) -> None:
    """Until a batch has run with the watermark at or past ``closing`` (every window written)."""
    started = last = time.monotonic()
    while True:
        r.check()
        r.pipe.metrics().poll(0.1)
        rows = progress_rows(r.pipe, r.job)
        if rows and max(b["watermark_ms"] for b in rows) >= closing:
            return
        now = time.monotonic()
        if now - started > WAIT_S:
            raise TimeoutError(f"{r.mode}: the watermark did not pass {closing} in {WAIT_S:.0f} s")
        if now - last > STATUS_S:
            last = now
            log(f"{r.mode}: waiting for the last windows to close ({now - started:.0f} s)")
        time.sleep(0.5)


def _check(r: ModeRun, events: Events, produced: int, window: int) -> dict[str, Any]:
    """Every window of the events produced against the reference (single process, same arrays)."""
    prefix = Events(events.ids[:produced], events.values[:produced], events.times[:produced], events.names)
    results, records = read_results(r.pipe, "beginning", r.job)  # type: ignore[arg-type]
    expected = closed_reference(reference(prefix, window), prefix, window, 2**62)
    report = compare(results, expected)
    return {**report, "output_records": records, "exact": equal(report)}


def _detail(text: str) -> dict[str, Any]:
    import json

    try:
        d = json.loads(text)
    except ValueError:
        return {"raw": text}
    return {
        "realized": d.get("realized"),
        "predicted": d.get("predicted"),
        "assign": len(d.get("assign", {})),
        "unassign": len(d.get("unassign", [])),
        "tracked_keys": d.get("tracked_keys"),
    }


def _plan_line(text: str) -> str:
    d = _detail(text)
    return (f"{d.get('assign')} keys assigned, {d.get('unassign')} handed back to the hash, max/mean "
            f"{d.get('realized')} -> {d.get('predicted')} planned")  # fmt: skip


def _figure_line(f: dict[str, Any]) -> str:
    def s(ms: float | None) -> str:
        return "-" if ms is None else f"{ms / 1000:.1f} s"

    return (
        f"steady p50 {s(f['steady_p50_ms'])}, peak during {s(f['peak_ms'])} ({f['peak_over_steady']}x), "
        f"{f['steps']} steps in {f['migration_s']} s, {f['state_bytes_moved']:,} state bytes; job CPU per "
        f"batch p50 {f['cpu_steady_p50_s']} s steady, {f['cpu_during_p50_s']} s during "
        f"(max {f['cpu_during_max_s']})"
    )
