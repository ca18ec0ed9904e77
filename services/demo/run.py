"""``make demo``: the whole pipeline as services on a drifting, bursting stream, twice, and a report.

The order, and why:

1. **The stack**: a local broker and a Kafka Connect worker (``ballast stack up --connect``), unless
   ``--bootstrap`` names a cluster (then ``--url`` names its Connect, or the file's events are
   produced directly, and the report says so).
2. **Two deployments, one after the other** (:class:`~services.demo.deployment.DemoRun`), each with
   its own topic prefix and its own routers, controller, shedder and Spark reduce, started as
   services: ``ballast`` (the rebalancing loop and shedding on) and ``hash`` (hash-only routing, no
   shedding), on the very same seeded input. Why not at the same time (``--together`` does that, on
   a machine with cores to spare): on 2 cores two Spark jobs with their micro-batches' fixed costs
   left no core idle, every stage lagged 10 to 20 s at the calm rate, and the shedder rightly shed
   before the burst came; the report would have shown the machine, not Ballast.
3. **Input**: a file of events through Kafka Connect's FileStreamSource (also the reduce's warm-up),
   then the feeder (:mod:`ballast.harness.feed`) writes the drifting Zipf stream, burst included,
   stamping each record with the time it is produced; every run's series are timed from its own
   stream's start, so the runs share one time axis in the report.
4. **Watching**: the live view shows what each deployment publishes (:mod:`ballast.status`); the
   demo decides nothing, it only produces input and reads topics.
5. **Closing**: flush events until each reduce's watermark passes its last window (a run that
   cannot within ``--drain-timeout-s``, the hash run after the burst, is reported as such), then every
   service is stopped and each run is read back from its topics (:mod:`services.demo.measure`).
6. **The report**: ``summary.json``, the plots and ``index.html`` (:mod:`services.demo.html_report`),
   and the verdict (:mod:`services.demo.verdicts`).

Every process the demo started is stopped on the way out, also on Ctrl-C (or SIGTERM) and when a
service fails; the report then says which service and where its log is.
"""

from __future__ import annotations

import contextlib
import signal
import time
import uuid
from pathlib import Path
from typing import Any

from ballast.cli.connection import ConnectionSettings
from ballast.deployment.acls import Principals
from ballast.deployment.create import grant_deployment
from ballast.devstack.connect import load_file
from ballast.devstack.jvm import StackSettings
from ballast.devstack.security import service_configs, stack_admin
from ballast.devstack.services import stack_processes
from ballast.devstack.stack import running_stack, start_stack, stop_stack
from ballast.harness.events import Events
from ballast.harness.feed import Feeder
from ballast.harness.pipeline import ServiceFailed
from ballast.kafka.configuration import KafkaConfig
from ballast.kafka.topics import LayoutSettings, TopicLayout
from ballast.workload import closing_flush, flush_now
from services.demo import measure, verdicts
from services.demo.deployment import CYCLE_S, DemoRun
from services.demo.settings import DemoSettings
from services.demo.summary import DemoSummary, RunSummary, Verdict
from services.demo.view import DemoView
from services.demo.workload import connect_events, demo_input, joined, json_lines
from spark_jobs.durations import interval_ms

FLUSH_EVERY_S = 5.0
TICK_S = 1.0


class Interrupted(Exception):
    """Ctrl-C or SIGTERM: stop everything, write what was seen."""


def _interrupt(signum: int, frame: Any) -> None:
    raise Interrupted(signal.Signals(signum).name)


def run_demo(s: DemoSettings, connection: ConnectionSettings, layout: LayoutSettings, stack: StackSettings,
             connect_url: str, view: DemoView) -> DemoSummary:  # fmt: skip
    """Run the demo (see the module docstring); the summary, its report written to ``--report-dir``."""
    summary = DemoSummary(started_at=time.time(), settings=s.as_dict())
    stack_dir = Path(connection.state_dir).resolve()
    started = created = False
    runs: list[DemoRun] = []
    service_kafka: dict[str, KafkaConfig] = {}  # each service kind's own principal (a secured stack)
    previous = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        if connection.bootstrap:
            kafka = connection.kafka_config("ballast-demo")
        else:
            created = not stack_dir.exists()
            started = running_stack(stack_dir) is None
            secured = " secured" if s.secure else ""
            view.say(f"starting the{secured} local stack (a KRaft broker and Kafka Connect) in {stack_dir}…")
            state = start_stack(
                stack_dir, brokers=1, connect=s.connect_records > 0, settings=stack, secure=s.secure
            )
            kafka = stack_admin(state, "ballast-demo")
            service_kafka = service_configs(state, "ballast-demo")
            connect_url = connect_url or (state.connect.url if state.connect else "")
            with_connect = f", Kafka Connect at {connect_url}" if connect_url else ""
            view.say(f"broker at {state.bootstrap}{with_connect}")
        tag = uuid.uuid4().hex[:6]
        for name in s.run_names():
            lay = TopicLayout(prefix=f"{layout.prefix}-demo-{tag}-{name}", workers=s.workers,
                              input_partitions=s.input_partitions)  # fmt: skip
            if service_kafka:
                grant_deployment(kafka, lay, Principals())
            runs.append(DemoRun(name, s, kafka, stack_dir, lay, service_kafka))
        _drive(s, kafka, runs, connect_url, view, summary, stack_dir)
    except Interrupted as exc:
        summary.failure = {"service": "", "reason": f"interrupted ({exc})", "log": ""}
        view.say(f"[yellow]interrupted ({exc}): stopping every process the demo started…[/yellow]")
    except ServiceFailed as exc:
        summary.failure = {"service": exc.service, "reason": str(exc).splitlines()[0], "log": exc.log}
        view.say(f"[red]service {exc.service} failed[/red]: see {exc.log}")
    except Exception as exc:  # reported, and everything is still stopped
        summary.failure = {"service": "", "reason": f"{type(exc).__name__}: {exc}", "log": ""}
        view.say(f"[red]the demo failed[/red]: {type(exc).__name__}: {exc}")
    finally:
        for sig in previous:  # a second Ctrl-C must not cut the clean-up short
            signal.signal(sig, signal.SIG_IGN)
        for run in runs:
            with contextlib.suppress(Exception):
                run.close()
        if started and not s.keep:
            stop_stack(stack_dir, purge=created and summary.failure is None)
        left = stack_processes(stack_dir) if stack_dir.exists() else []
        summary.verdicts.append(Verdict("every process the demo started is stopped", not left,
                                        f"{len(left)} still running" if left else "none left"))  # fmt: skip
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    summary.duration_s = round(time.time() - summary.started_at, 1)
    summary.ok = summary.failure is None and all(v.ok for v in summary.verdicts)
    return summary


def _drive(s: DemoSettings, kafka: KafkaConfig, runs: list[DemoRun], connect_url: str, view: DemoView,
           summary: DemoSummary, folder: Path) -> None:  # fmt: skip
    """The runs one after the other (``--together``: at once), then the verdict over all of them."""
    for group in [runs] if s.together else [[r] for r in runs]:
        _drive_group(s, kafka, group, connect_url, view, summary, folder)
    summary.verdicts += verdicts.verdicts(summary.runs, s.input_s, CYCLE_S)


def _drive_group(s: DemoSettings, kafka: KafkaConfig, runs: list[DemoRun], connect_url: str, view: DemoView,
                 summary: DemoSummary, folder: Path) -> None:  # fmt: skip
    """Runs that share one feeder: started, fed, closed, stopped and read back."""
    inp = demo_input(s)
    for r in runs:
        r.start()
    view.say(f"started {len(runs)} deployment(s): " + "; ".join(
        f"{r.name} = {len(r.services)} services on prefix {r.layout.prefix}" for r in runs))  # fmt: skip
    for r in runs:
        r.wait_up()
        view.say(f"{r.name}: every service ready, the reduce reading (logs in {folder / 'services'})")
    prologue = _load_prologue(s, kafka, runs, connect_url, view, folder)
    feeder = Feeder(kafka, tuple(r.input_topic for r in runs), inp.events, inp.phases)  # same seed every run
    view.say(f"streaming {s.input_s:g} s of input at {s.rate:g}/s, hot set drawn anew every {s.shift_s:g} s"
             + (f", a burst of {s.burst_factor:g}x at {s.burst_at_s:g} s" if s.burst_s else ""))  # fmt: skip
    feeder.start()
    try:
        while feeder.is_alive():
            _tick(runs, view, feeder, s)
        produced = feeder.stop()
    finally:
        if feeder.is_alive():
            feeder.stop()
    start_ms = feeder.phase_starts[inp.phases[0].name]
    end_ms = start_ms + int(s.input_s * 1000)
    events = joined(prologue, feeder.produced_events()) if prologue is not None else feeder.produced_events()
    view.say(f"input done: {produced:,} events; closing the last windows…")
    closed = _close_windows(s, runs, events, view, produced)
    for r in runs:
        r.close()
    view.say(f"{', '.join(r.name for r in runs)}: every service stopped; reading back from the topics…")
    window_ms = interval_ms(s.window)
    for r in runs:
        rs = RunSummary(name=r.name, rebalance=r.rebalance, shedding=r.shedding, theta=s.theta,
                        interval_s=s.interval_s, target_s=s.target_s, shifts_s=inp.shifts_s,
                        burst_s=inp.burst_s)  # fmt: skip
        rs.logs = {name: r.pipe.service(name).log for name in r.services}
        judged = events if closed[r.name] else None
        measure.read_run(r, rs, start_ms, end_ms, judged, window_ms)
        rs.figures["closed_windows"] = closed[r.name]
        rs.figures["events"] = int(events.ids.size)
        summary.runs[r.name] = rs


def _load_prologue(s: DemoSettings, kafka: KafkaConfig, runs: list[DemoRun], connect_url: str,
                   view: DemoView, folder: Path) -> Events | None:  # fmt: skip
    """The Connect file's events, in every run's input topic and routed (None: no prologue)."""
    if not s.connect_records:
        return None
    events = connect_events(s, int(time.time() * 1000))
    if connect_url:
        file = folder / f"demo-input-{runs[0].layout.prefix}.jsonl"
        with open(file, "w") as out:
            out.writelines(json_lines(events))
        for r in runs:
            load_file(connect_url, file, r.input_topic, name=f"{r.layout.prefix}-file-source")
        view.say(f"Kafka Connect: FileStreamSource streams {events.ids.size:,} JSON lines of {file.name} "
                 "into each input topic")  # fmt: skip
    else:
        for r in runs:
            r.pipe.produce_raw((None, line.encode()) for line in json_lines(events))
        view.say(f"no Kafka Connect (--bootstrap without --url): {events.ids.size:,} JSON events produced")
    for r in runs:
        r.pipe.wait_routed(events.ids.size, s.ready_timeout_s, watch=r.services)
    # the file is also the reduce's warm-up: its first micro-batches with data open every state
    # partition and start the Python workers (10 to 20 s each on 2 cores), which would otherwise
    # show as lag at the start of the measured stream
    for r in runs:
        r.pipe.wait_reduce_caught_up(r.job, s.ready_timeout_s, watch=r.services)
    view.say("the file's events are routed and reduced in every run")
    return events


def _tick(runs: list[DemoRun], view: DemoView, feeder: Feeder, s: DemoSettings) -> None:
    began = time.monotonic()
    feeder.check()
    for r in runs:
        r.observe()
    first = next(iter(feeder.phase_starts.values()), None)
    at = 0.0 if first is None else time.time() - first / 1000
    phase = feeder.phase or "starting"
    view.update(f"t = {at:5.0f} s of {s.input_s:g} · {phase} · {feeder.produced:,} events per input topic",
                runs)  # fmt: skip
    time.sleep(max(0.0, TICK_S - (time.monotonic() - began)))


def _close_windows(s: DemoSettings, runs: list[DemoRun], events: Events, view: DemoView,
                   produced: int) -> dict[str, bool]:  # fmt: skip
    """Flush events to each run until its reduce's watermark passed the last window's end; which
    runs did within ``drain_timeout_s``."""
    last_time = int(events.times.max())
    closing, ahead = closing_flush(last_time, interval_ms(s.window), interval_ms(s.watermark_delay))
    closed = {r.name: False for r in runs}
    deadline = time.monotonic() + s.drain_timeout_s
    last_flush = 0.0
    seq = produced
    while time.monotonic() < deadline and not all(closed.values()):
        now = time.monotonic()
        flush = now - last_flush >= FLUSH_EVERY_S
        for r in runs:
            r.observe()
            if closed[r.name]:
                continue
            if r.watermark() >= closing:
                closed[r.name] = True
                view.say(f"{r.name}: every window closed")
            elif flush:  # a flush event may itself be shed, and may not run ahead of the clock:
                # one into every input partition every few seconds until the watermark passes
                r.pipe.flush(flush_now(last_time, ahead, seq=seq))
        if flush:
            last_flush, seq = now, seq + 1
        left = deadline - time.monotonic()
        view.update(f"closing the last windows ({left:.0f} s left for runs still behind)", runs)
        time.sleep(TICK_S)
    for r in runs:
        if not closed[r.name]:
            lag = r.status.stage_lag("reduce") if r.status is not None else None
            view.say(f"{r.name}: windows not closed within {s.drain_timeout_s:g} s (reduce lag {lag} s): "
                     "its results are not judged")  # fmt: skip
    return closed
