"""``make demo``: the main job on the local stack, as a function that returns a :class:`DemoReport`.

It runs the part of Ballast that exists, live, every service as its own process started through the
local stack's supervisor (:class:`~ballast.harness.pipeline.Pipeline`), exactly as ``ballast router
run`` and ``ballast reduce run`` would be started by a user:

1. creates Ballast's topics (under a fresh prefix) and the control log's genesis (epoch 0), starts
   the **Spark stateful reduce** (``ballast reduce run``), and writes Zipf-skewed Avro input events;
2. starts the **router** (exactly-once) on the first half: every key follows Kafka's hash, and the
   router publishes per-worker counts and heavy hitters to the metrics topic;
3. once the reduce has read the first half, runs one planning round of the controller
   (``ballast controller plan``: router statistics -> Mixed plan -> a ``ROUTING_UPDATE``, epoch 1);
4. the router applies epoch 1 at a transaction boundary (its markers in every routed partition) and
   routes the second half with the table; the reduce's workers move the pinned keys' state live;
5. routes one far-future *flush* event (:func:`ballast.workload.flush_event`), which closes every
   window of the reduce;
6. reads the routed topic back (read_committed) and checks every input record arrived exactly once;
7. waits for the reduce's windows of every key, stops it, and checks every output row against the
   input (per key: records and sum of values) and the moves against the plan.

Why a report and no printing: the renderer (services/demo/render.py) shows it to people, the
end-to-end test asserts on it. Every service and client is stopped or closed before a stack the
demo started is stopped, so nothing is left retrying against a broker that is gone.
"""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Protocol

from ballast.avro.codec import AvroCodec
from ballast.cli.connection import ConnectionSettings
from ballast.devstack.jvm import StackSettings
from ballast.devstack.stack import running_stack, start_stack, stop_stack
from ballast.harness.pipeline import Pipeline
from ballast.kafka.configuration import KafkaConfig
from ballast.kafka.reading import read_topic
from ballast.kafka.topics import LayoutSettings, TopicLayout
from ballast.metrics.records import WorkerStats
from ballast.waiting import wait_until
from ballast.workload import FLUSH_KEY, flush_event, input_events
from services.demo.check import auto_watermark_delay, batch_figures, check_reduce, key_totals
from services.demo.outputs import OutputWindows, dead_letters
from services.demo.report import DemoReport, PlanSummary, ReduceSummary
from services.demo.settings import DemoSettings

ROUTER = "demo-router"
JOB_ID = "demo-reduce"
REDUCE = f"reduce-{JOB_ID}"


class DemoProgress(Protocol):
    """Where a run reports what it is doing (the console renderer, or nothing in tests)."""

    def status(self, message: str) -> None: ...

    def counter(self, label: str, total: int) -> AbstractContextManager[Callable[[int], None]]: ...


def run_demo(
    demo: DemoSettings,
    connection: ConnectionSettings,
    layout: LayoutSettings,
    progress: DemoProgress,
    stack: StackSettings | None = None,
) -> DemoReport:
    """Run the demo against ``connection.bootstrap``, else the local stack in ``connection.state_dir``.

    A stack the demo had to start is stopped afterwards (and its folder removed if the demo made
    it and the run was clean), unless ``demo.keep``; a stack that was already running is left as
    it was. The services run in the state folder (``<state>/services/<name>``, logs included).
    """
    stack_dir = Path(connection.state_dir).resolve()
    started = created = False
    if connection.bootstrap:
        kafka = connection.kafka_config("ballast-demo")
    else:
        created = not stack_dir.exists()
        started = running_stack(stack_dir) is None
        if started:
            progress.status(f"starting a local Kafka broker (KRaft) in {stack_dir}…")
        bootstrap = start_stack(stack_dir, brokers=1, settings=stack).bootstrap
        progress.status(f"broker {'up' if started else 'already running'} at {bootstrap}")
        kafka = KafkaConfig.plaintext(bootstrap, "ballast-demo")
    report: DemoReport | None = None
    try:
        report = _run_pipeline(kafka, demo, layout, progress, stack_dir)
    finally:
        if started and not demo.keep:
            keep_logs = report is None or not report.ok
            stop_stack(stack_dir, purge=created and not keep_logs)
            progress.status("local stack stopped" + (f"; logs kept in {stack_dir}" if keep_logs else ""))
    report.started_stack = started
    report.stack_dir = None if connection.bootstrap else str(stack_dir)
    return report


def _run_pipeline(
    cfg: KafkaConfig,
    demo: DemoSettings,
    layout_settings: LayoutSettings,
    progress: DemoProgress,
    folder: Path,
) -> DemoReport:
    """Everything that talks to Kafka; every service and client it starts is stopped when it returns."""
    prefix = f"{layout_settings.prefix}-demo-{uuid.uuid4().hex[:6]}"
    layout = TopicLayout(
        prefix=prefix, workers=layout_settings.workers, input_partitions=layout_settings.input_partitions
    )
    events = list(input_events(demo.records, num_keys=demo.keys, z=demo.zipf, seed=demo.seed))
    half = len(events) // 2
    with Pipeline(
        cfg, layout, folder, active_workers=layout_settings.active_workers, issuer="ballast-demo"
    ) as pipe:
        progress.status(f"topics created: {', '.join(s.name for s in layout.specs().values())}")
        assert pipe.deployment is not None
        progress.status(f"control log genesis, {pipe.deployment.genesis.describe()}")
        report = DemoReport(
            bootstrap=cfg.bootstrap_servers,
            routed_topic=layout.name("routed"),
            workers=layout.workers,
            produced=demo.records,
        )
        summary = _start_reduce(pipe, demo, events, progress) if demo.reduce else None
        output = OutputWindows(cfg, layout.name("output"), JOB_ID) if summary is not None else None
        try:
            _produce(pipe, events[:half], progress, "producing the first half")
            progress.status(f"wrote {half:,} Avro input events (Zipf z={demo.zipf} over {demo.keys:,} keys)")
            flush = [flush_event(max(e["event_time"] for e in events), seq=len(events))] if summary else []
            report.flush_events = len(flush)
            moves = _route(pipe, demo, events, flush, report, progress, summary is not None)
            flush_routed_at = time.monotonic()
            progress.status("reading the routed topic back…")
            _check_routed(cfg, layout, events + flush, len(events), report)
            if summary is not None and output is not None and report.plan is not None:
                progress.status("reduce: waiting for the windows of every key (the flush event closes them)…")
                report.reduce = _finish_reduce(pipe, demo, summary, output, events, moves, report.plan.epoch,
                                               progress, flush_routed_at)  # fmt: skip
                r = report.reduce
                progress.status(
                    f"reduce: {r.windows:,} windows on the output topic {r.drain_s:.1f} s after the flush, "
                    f"{r.micro_batches} micro-batches; query and Spark stopped"
                )
        finally:
            if output is not None:
                output.close()
    return report


def _start_reduce(
    pipe: Pipeline, demo: DemoSettings, events: list[dict], progress: DemoProgress
) -> ReduceSummary:
    """``ballast reduce run`` as a service, waited for until its query runs."""
    s = ReduceSummary(
        job=JOB_ID,
        processor=demo.processor,
        watermark_delay=demo.watermark_delay or auto_watermark_delay(events),
        trigger=demo.trigger,
        local_cores=demo.local_cores,
        flush_key=FLUSH_KEY,
    )
    progress.status("starting the Spark reduce (`ballast reduce run`, a local SparkSession)…")
    started = time.monotonic()
    command = pipe.reduce(
        JOB_ID,
        s.processor,
        watermark_delay=s.watermark_delay,
        trigger=s.trigger,
        local_cores=s.local_cores,
        checkpoint=pipe.folder / "services" / REDUCE / f"checkpoint-{pipe.layout.prefix}",
    )
    try:
        pipe.start(command, timeout=demo.reduce_timeout_s)
    except Exception as exc:
        raise RuntimeError(f"the Spark reduce did not start: {exc}") from exc
    s.start_s = time.monotonic() - started
    s.spark_log = None
    progress.status(
        f"reduce: query {s.job} up in {s.start_s:.1f} s (local[{s.local_cores}], one state "
        f"partition per routed partition, {s.processor}, watermark delay {s.watermark_delay}, "
        f"trigger {s.trigger})"
    )
    return s


def _route(
    pipe: Pipeline,
    demo: DemoSettings,
    events: list[dict],
    flush: list[dict],
    report: DemoReport,
    progress: DemoProgress,
    reduce: bool,
) -> dict[str, tuple[int, int]]:
    """The router on the first half (epoch 0), the plan (epoch 1), the second half, then ``flush``;
    the plan waits for the reduce to have read the first half.

    Returns the plan's pinned keys, each with (hash home, pinned worker).
    """
    half = len(events) // 2
    watch = [ROUTER, REDUCE] if reduce else [ROUTER]
    pipe.start(
        pipe.router(
            ROUTER,
            name=ROUTER,
            exactly_once=True,
            stats_interval_s=1.0,
            commit_interval_ms=300,
            heavy_hitters_top=demo.tracked_keys,
        )
    )
    pipe.wait_routed(half, 120, watch=watch)
    progress.status(f"router routed {half:,} records under epoch 0 (Kafka's murmur2 only)")
    if reduce:
        pipe.wait_reduce_caught_up(JOB_ID, demo.reduce_timeout_s, watch=watch)
        progress.status("reduce: read every routed record of epoch 0 (state built at the hash homes)")
    # the controller's planning round, once the statistics cover what was routed: the routers
    # publish one every second, busy or not, so the records to cover say when the read is complete
    info = pipe.plan(demo.theta, records=half, reason="demo: Mixed plan from router heavy hitters")
    report.plan = PlanSummary(
        epoch=int(info["epoch"]),
        pinned_keys=len(info["assign"]),
        heavy_hitters=int(info["heavy_hitters"]),
        plan_time_ms=float(info["plan_ms"]),
        predicted_max_mean=float(info["predicted_max_mean"]),
        feasible=bool(info["feasible"]),
    )
    progress.status(
        f"control log epoch {report.plan.epoch}: ROUTING_UPDATE pins {report.plan.pinned_keys} keys "
        f"(Mixed plan from {report.plan.heavy_hitters:,} heavy hitters)"
    )
    pipe.wait_epoch(report.plan.epoch, 60)
    _produce(pipe, events[half:], progress, "producing the second half")
    pipe.wait_routed(len(events), 120, watch=watch)
    if flush:
        # only now: a record routed after it would be behind the watermark it raises
        _produce(pipe, flush, progress, "producing the flush event")
        pipe.wait_routed(len(events) + len(flush), 120, watch=watch)
    pipe.stop(ROUTER)  # it commits what is open and prints its totals
    totals = json.loads(pipe.output(ROUTER).strip().splitlines()[-1])
    report.routed, report.markers = int(totals["routed"]), int(totals["markers"])
    report.transactions, report.dead_lettered = int(totals["transactions"]), int(totals["dead_lettered"])
    return {k: (int(home), int(w)) for k, (home, w) in info["moves"].items()}


def _produce(pipe: Pipeline, events: list[dict], progress: DemoProgress, label: str) -> None:
    with progress.counter(label, len(events)) as advance:
        done = 0
        for i in range(0, len(events), 10_000):
            done += pipe.produce(events[i : i + 10_000])
            advance(done)


def _finish_reduce(
    pipe: Pipeline,
    demo: DemoSettings,
    s: ReduceSummary,
    output: OutputWindows,
    events: list[dict],
    moves: dict[str, tuple[int, int]],
    plan_epoch: int,
    progress: DemoProgress,
    flush_routed_at: float,
) -> ReduceSummary:
    """Wait for every key's windows and a quiet job, stop it, check every output row against the input."""
    expected = key_totals(events)
    keys = set(expected)
    try:
        with progress.counter("reduce: keys with windows", len(keys)) as advance:

            def every_key() -> bool:
                pipe.check_running(REDUCE)
                output.poll(0.5)
                advance(len(keys & output.keys))
                return keys <= output.keys

            wait_until(
                every_key,
                demo.reduce_timeout_s,
                "the reduce writing a window for every key",
                interval=0,
                describe=lambda: f"{len(keys & output.keys):,} of {len(keys):,} keys",
            )
        pipe.wait_reduce_settled(JOB_ID, demo.reduce_timeout_s, watch=[REDUCE])
        output.drain()
    except Exception as exc:  # reported, and the demo still stops everything and says what it saw
        s.error = f"{type(exc).__name__}: {exc}"
    s.drain_s = time.monotonic() - flush_routed_at
    batch_figures(s, pipe.reduce_progress(JOB_ID))
    pipe.stop(REDUCE)
    reader = pipe.metrics()
    reader.read_to_end()
    stats = reader.bodies(WorkerStats, prefix=f"{s.job}/worker-")
    layout = pipe.layout
    dead = dead_letters(pipe.kafka, layout.name("dead_letter"), layout.name("routed"))
    check_reduce(s, expected, output.writes, stats, dead, moves, plan_epoch)
    if not s.ok:
        s.spark_log = pipe.service(REDUCE).log  # kept for a look at what Spark said
    return s


def _check_routed(
    cfg: KafkaConfig, layout: TopicLayout, produced: list[dict], workload: int, report: DemoReport
) -> None:
    """Compare the routed topic with what the demo itself produced (sequence number in the payload).

    ``produced`` holds every input record, the flush event included: each must arrive exactly once.
    The per-worker load counts the first ``workload`` only (the demo's traffic, not the flush).
    The reduce's state chunks share the topic and are skipped, like the epoch markers.
    """
    envelope = AvroCodec("io.ballast.RoutedEnvelope")
    load: dict[int, Counter[int]] = defaultdict(Counter)
    seqs: Counter[int] = Counter()
    for m in read_topic(cfg, layout.name("routed"), min_records=len(produced), idle=3, timeout=120):
        branch, body = envelope.decode(m.value(), m.topic(), m.partition(), m.offset())["body"]
        if branch != "io.ballast.DataRecord":
            continue
        seq = int.from_bytes(body["payload"][:8], "big")
        seqs[seq] += 1
        if seq < workload:
            load[body["epoch"]][m.partition()] += 1
    report.missing = sum(1 for i in range(len(produced)) if seqs[i] == 0)
    report.duplicated = sum(c - 1 for c in seqs.values() if c > 1)
    report.load_by_epoch = {e: [load[e][w] for w in range(layout.workers)] for e in sorted(load)}
