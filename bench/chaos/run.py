"""One seed's campaign: three brokers of its own, the pipeline as services, the input with its burst,
the plan's faults on its clock, the last windows closed, everything read back and judged.

The order, and why:

1. **A stack of its own** (``ballast stack up --brokers 3``: replication 3, ``min.insync.replicas``
   2) in the run's folder, so a broker can be killed without touching anyone else's.
2. **The services**, started together and waited for (:mod:`bench.chaos.deployment`).
3. **Input and faults**: the feeder writes the stream; every half second the injector starts what
   is due, ends what has been held long enough and restarts a service that exited on its own (a
   defect, reported). A progress line every ``status_s`` and one per fault event.
4. **Closing**: once every fault has ended and the clock is past the last window's end plus the
   watermark delay, a flush event to every input partition every 5 s, until the reduce's watermark
   passes the last window (or ``drain_timeout_s``: the windows left open are reported as unjudged);
   then until the reduce has read the routed topic to its end.
5. **Read back and judge** (:mod:`bench.chaos.readback`, :mod:`bench.chaos.judge`), recovery per
   fault (:mod:`bench.chaos.recovery`).

Whatever happens, every stopped process is continued, every service stopped and the stack taken
down (``stack down``); the services' logs are kept (the brokers' data is not) when the run failed.
"""

from __future__ import annotations

import math
import shutil
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ballast.devstack.stack import start_stack, stop_stack
from ballast.harness.control_series import keep_series
from ballast.harness.pipeline import Pipeline
from ballast.kafka.configuration import KafkaConfig
from ballast.kafka.topics import TopicLayout
from ballast.metrics.records import LagSample
from ballast.waiting import WaitTimeout
from bench.chaos.deployment import commands, job_of, targets
from bench.chaos.faults import Injector
from bench.chaos.feed import Feeder, Writer, phases, stream, warm_up
from bench.chaos.judge import judge
from bench.chaos.ledger import DATA, Ledger
from bench.chaos.params import Params
from bench.chaos.plan import make_plan
from bench.chaos.readback import read_back
from bench.chaos.recovery import pipeline_lag, recovery
from bench.chaos.stacks import dump_stacks
from services.demo.measure import interval_imbalance
from spark_jobs.durations import interval_ms

TICK_S = 0.5
FLUSH_EVERY_S = 5.0
IMBALANCE_MS = 5_000


def run_seed(p: Params, seed: int, folder: Path, say: Callable[[str], None]) -> dict[str, Any]:
    """The run's report (see :mod:`bench.chaos.report` for its fields); never raises for a failed run."""
    plan = make_plan(seed, p)
    stack_dir = folder / f"seed-{seed}"
    out: dict[str, Any] = {"seed": seed, "plan": plan.as_dict()}
    began = time.time()
    pipe: Pipeline | None = None
    injector: Injector | None = None
    feeder: Feeder | None = None
    try:
        say(f"seed {seed}: starting 3 brokers in {stack_dir}")
        state = start_stack(stack_dir, brokers=3)
        kafka = KafkaConfig.plaintext(state.bootstrap, "chaos")
        layout = TopicLayout(prefix=f"chaos{seed}", workers=p.workers, input_partitions=p.input_partitions)
        pipe = Pipeline(kafka, layout, stack_dir, issuer="ballast-chaos")
        services = commands(pipe, p)
        for command in services.values():
            pipe.start(command, wait=False)
        for name in services:
            pipe.wait_ready(name, p.ready_timeout_s)
        say(f"seed {seed}: {len(services)} services ready: {', '.join(services)}")
        ledger = Ledger()
        writer = Writer(kafka, layout.name("input"), ledger, "chaos-writer")
        injector = Injector(pipe, services, targets(pipe, p), ledger, writer, p, seed, say)
        injector.plan(plan.faults)
        schedule = phases(p, plan.burst_at_s)
        ids, vals = stream(p, schedule, seed)
        if p.warmup_records:
            warm_ids, warm_vals = stream(p, schedule, seed + 1000)
            warm_up(writer, warm_ids[: p.warmup_records], warm_vals[: p.warmup_records])
            pipe.wait_routed(p.warmup_records, p.ready_timeout_s, watch=list(services))
            pipe.wait_reduce_caught_up(job_of(pipe), p.ready_timeout_s, watch=list(services))
            say(f"seed {seed}: {p.warmup_records:,} warm-up records routed and reduced; the clock starts")
        feeder = Feeder(kafka, layout.name("input"), ledger, schedule, ids, vals)
        feeder.start()
        lag = LagWatch(pipe)
        _stream(p, seed, pipe, feeder, injector, lag, say)
        out["input"] = {
            "started_ms": feeder.started_ms,
            "ended_ms": feeder.last_ms,
            "produced": feeder.produced,
            "burst_at_s": plan.burst_at_s,
            "burst_s": p.burst_s,
        }
        closed_to, closed = _close(p, pipe, injector, writer, ledger, lag, say)
        out["closed"] = closed
        try:
            pipe.wait_reduce_settled(job_of(pipe), p.drain_timeout_s)
            out["settled"] = True
        except WaitTimeout as exc:  # judged all the same: what it did not read is in no row
            out["settled"] = False
            say(f"[yellow]the reduce did not read the routed topic to its end: {exc}[/yellow]")
        injector.tick(1e9)
        out.update(_judge(p, pipe, ledger, injector, closed_to, feeder.started_ms, say))
    except Exception as exc:  # the report says what failed; the next seed still runs
        out["error"] = f"{type(exc).__name__}: {exc}"
        out["traceback"] = traceback.format_exc()[-4000:]
        say(f"[red]seed {seed} failed[/red]: {out['error']}")
    finally:
        if injector is not None:
            injector.finish()
            out.setdefault("faults", [f.as_dict() for f in injector.faults])
            out["unexpected_exits"] = [e.as_dict() for e in injector.exits]
        if feeder is not None:
            feeder.stop()
        if pipe is not None:
            pipe.close()
        stop_stack(stack_dir)
        out["duration_s"] = round(time.time() - began, 1)
    return out


class LagWatch:
    """The newest lag per stage as the shedder published it (the largest partition's), read as it
    comes: for the progress lines, and to know when the pipeline is back under target."""

    def __init__(self, pipe: Pipeline) -> None:
        self.pipe = pipe
        self.measured: dict[str, tuple[int, float]] = {}  # stage -> (measured at ms, largest lag then)

    def poll(self) -> None:
        for m in self.pipe.metrics().poll(0.05):
            b = m.body
            if isinstance(b, LagSample) and b.stage and math.isfinite(b.lag_seconds):
                at, worst = self.measured.get(b.stage, (0, 0.0))
                if m.interval_end > at:  # a new measurement: its partitions' largest lag
                    self.measured[b.stage] = (m.interval_end, b.lag_seconds)
                elif m.interval_end == at:
                    self.measured[b.stage] = (at, max(worst, b.lag_seconds))

    def stage(self, name: str) -> float:
        return self.measured.get(name, (0, math.nan))[1]

    def under(self, target_s: float, since_ms: int) -> bool:
        """Both stages measured after ``since_ms``, their sum under ``target_s``."""
        both = [self.measured.get(s) for s in ("router", "reduce")]
        return all(x is not None and x[0] > since_ms for x in both) and sum(x[1] for x in both) < target_s  # type: ignore[union-attr]


def _stream(
    p: Params,
    seed: int,
    pipe: Pipeline,
    feeder: Feeder,
    injector: Injector,
    lag: LagWatch,
    say: Callable[[str], None],
) -> None:
    """Input and faults, until the input is written and every fault has ended."""
    t0 = time.monotonic()
    last_status = 0.0
    deadline = t0 + p.input_s + p.ready_timeout_s + 300
    while feeder.is_alive() or injector.pending():
        feeder.check()
        elapsed = time.monotonic() - t0
        injector.tick(elapsed)
        lag.poll()
        if time.monotonic() - last_status >= p.status_s:
            last_status = time.monotonic()
            held = [
                f"{f.spec.kind}:{f.spec.target}({f.phase})"
                for f in injector.faults
                if f.phase in ("injected", "recovering")
            ]
            say(
                f"seed {seed} t={elapsed:5.0f}s {feeder.phase or 'starting':8s} "
                f"{feeder.produced:>7,} events · "
                f"lag router {lag.stage('router'):5.1f}s reduce {lag.stage('reduce'):5.1f}s"
                + (f" · {' '.join(held)}" if held else "")
            )
        if time.monotonic() > deadline:
            raise TimeoutError(f"faults still not over {deadline - t0:.0f} s into the input")
        time.sleep(TICK_S)
    feeder.check()


def _close(
    p: Params,
    pipe: Pipeline,
    injector: Injector,
    writer: Writer,
    ledger: Ledger,
    lag: LagWatch,
    say: Callable[[str], None],
) -> tuple[int, bool]:
    """Flush every input partition until the reduce's watermark passes the last window, and wait
    until the lag is back under target after the last fault (its recovery is measured); (the
    watermark reached, whether it passed the last window)."""
    window = interval_ms(p.window)
    records = ledger.columns()
    last = int(records.time[records.kind == DATA].max())
    last_end = (last // window + 1) * window
    flush_from = last_end + interval_ms(p.watermark_delay) + 1_000
    last_fault = max((f.ended_at for f in injector.faults), default=0)
    job = job_of(pipe)
    deadline = time.monotonic() + p.drain_timeout_s
    last_flush = 0.0
    mark = 0
    closed = recovered = False
    while time.monotonic() < deadline:
        injector.tick(1e9)
        lag.poll()
        mark = max((b.watermark_ms for b in pipe.reduce_progress(job)), default=0)
        if mark >= last_end and not closed:
            closed = True
            say(f"every window closed (watermark {(mark - last_end) / 1000:+.1f} s from the last window end)")
        if lag.under(p.target_s, last_fault) and not recovered:
            recovered = True
            say(f"the lag is back under the {p.target_s:g} s target after the last fault")
        if closed and recovered:
            return mark, True
        if not closed and time.time() * 1000 >= flush_from and time.monotonic() - last_flush >= FLUSH_EVERY_S:
            writer.flush_all(p.input_partitions)
            last_flush = time.monotonic()
        time.sleep(TICK_S)
    if not closed:
        say(
            f"[yellow]the last windows did not close within {p.drain_timeout_s:g} s (watermark "
            f"{(mark - last_end) / 1000:+.1f} s from the last window's end)[/yellow]"
        )
    if not recovered:
        say(f"[yellow]the lag was not back under target within {p.drain_timeout_s:g} s[/yellow]")
    if not (closed and recovered):
        for line in dump_stacks(pipe):  # what each service was doing, before the run is torn down
            say(line)
    return mark, closed


def _judge(
    p: Params,
    pipe: Pipeline,
    ledger: Ledger,
    injector: Injector,
    closed_to: int,
    start_ms: int,
    say: Callable[[str], None],
) -> dict[str, Any]:
    say("reading back every output row and dead letter…")
    records = ledger.columns()
    rb = read_back(pipe.kafka, pipe.layout, job_of(pipe), records)
    keeps = keep_series(rb.control, pipe.layout.name("input"))
    window = interval_ms(p.window)
    margin = interval_ms(p.shed_margin)
    reach = interval_ms(p.correction_horizon)
    spans = [
        (f"{f.spec.kind} {f.spec.target}", f.injected_at, f.ended_at or f.injected_at)
        for f in injector.faults
        if f.injected_at
    ]
    figures = judge(records, rb.letters, rb.rows, keeps, window, closed_to, margin, reach, spans=spans)
    lag = pipeline_lag(rb.lag)
    faults = [f.as_dict() for f in injector.faults]
    for f in faults:
        f.update(recovery(f, lag, p.target_s))
    end = int(records.time[records.kind == DATA].max()) + window
    series = {
        "lag": [[round((at - start_ms) / 1000, 2), round(r, 2), round(d, 2)] for at, r, d in lag],
        "imbalance": interval_imbalance(
            rb.routed_times.tolist(), rb.routed_workers.tolist(), start_ms, end, IMBALANCE_MS, p.workers
        ),
        "keep": [[round((k["at_ms"] - start_ms) / 1000, 2), k["keep"]] for k in keeps],
        "watermark_lag": [
            [round((at - start_ms) / 1000, 2), round((at - w) / 1000, 2)] for at, w in rb.watermarks if w > 0
        ],
    }
    say(
        f"judged: {figures['records']:,} records, {figures['records_lost']} lost, "
        f"{figures['rows_wrong']} rows wrong, {figures['false_exact']} false exact, "
        f"{figures['late_records']} late"
    )
    return {"results": figures, "faults": faults, "series": series, "control_junk_read": rb.control_junk}


def keep_logs(folder: Path) -> None:
    """A failed run's folder without the brokers' data (the services' and brokers' logs stay)."""
    for data in folder.glob("seed-*/node-*/data"):
        shutil.rmtree(data, ignore_errors=True)
