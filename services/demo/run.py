"""``make demo``: the main job on the local stack, as a function that returns a :class:`DemoReport`.

It runs the part of Ballast that exists, live:

1. creates Ballast's topics (under a fresh prefix) and the control log's genesis (epoch 0), starts
   the **Spark stateful reduce** in this process (services/demo/reduce.py), and writes
   Zipf-skewed Avro input events;
2. runs the **router** (exactly-once) on the first half: every key follows Kafka's hash, and the
   router publishes per-worker counts and heavy hitters to the metrics topic;
3. plans a routing table from those metrics with the controller's planning round (Mixed planner)
   and appends it to the **control log** as epoch 1;
4. the router applies epoch 1 at a transaction boundary, writes its epoch markers, and routes the
   second half with the table; the reduce's workers move the pinned keys' state live (chunks);
5. routes one far-future *flush* event, which closes every window of the reduce;
6. reads the routed topic back (read_committed) and checks every input record arrived exactly once;
7. waits for the reduce's windows of every key, stops it, and checks them against the input
   (per key: records and sum of values) and the moves against the plan.

Why a report and no printing: the renderer (services/demo/render.py) shows it to people, the
end-to-end test asserts on it. Every Kafka client is closed before a stack the demo started is
stopped, so no client is left retrying against a broker that is gone.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Protocol

from ballast.avro.codec import AvroCodec
from ballast.control.deployment import create_deployment
from ballast.control.log import ControlLogWriter
from ballast.control.state import routing_update
from ballast.devstack.stack import StackSettings, running_stack, start_stack, stop_stack
from ballast.kafka.clients import make_producer, produce_all
from ballast.kafka.config import KafkaConfig
from ballast.kafka.connection import ConnectionSettings
from ballast.kafka.reading import read_topic
from ballast.kafka.topics import LayoutSettings, TopicLayout
from ballast.routing.murmur2 import kafka_partition
from ballast.waiting import wait_until
from ballast.workload import input_events
from services.controller.planning import plan_from_load
from services.controller.router_load import read_router_load
from services.demo.reduce import DemoReduce, flush_event
from services.demo.report import DemoReport, PlanSummary
from services.demo.settings import DemoSettings
from services.router.config import RouterSettings
from services.router.router import Router


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
    it), unless ``demo.keep``; a stack that was already running is left as it was.
    """
    stack_dir = Path(connection.state_dir).resolve()
    started = created = False
    bootstrap = connection.bootstrap
    if not bootstrap:
        created = not stack_dir.exists()
        started = running_stack(stack_dir) is None
        if started:
            progress.status(f"starting a local Kafka broker (KRaft) in {stack_dir}…")
        bootstrap = start_stack(stack_dir, brokers=1, settings=stack).bootstrap
        progress.status(f"broker {'up' if started else 'already running'} at {bootstrap}")
    try:
        report = _run_pipeline(
            KafkaConfig(bootstrap_servers=bootstrap, client_id="ballast-demo"), demo, layout, progress
        )
    finally:
        if started and not demo.keep:
            stop_stack(stack_dir, purge=created)
            progress.status("local stack stopped")
    report.started_stack = started
    report.stack_dir = str(stack_dir) if started or not connection.bootstrap else None
    return report


def _run_pipeline(
    cfg: KafkaConfig, demo: DemoSettings, layout_settings: LayoutSettings, progress: DemoProgress
) -> DemoReport:
    """Everything that talks to Kafka; every client it makes is closed when it returns."""
    prefix = f"{layout_settings.prefix}-demo-{uuid.uuid4().hex[:6]}"
    layout = TopicLayout(
        prefix=prefix, workers=layout_settings.workers, input_partitions=layout_settings.input_partitions
    )
    active = layout_settings.active_workers
    created = create_deployment(cfg, layout, active, issuer="ballast-demo")
    progress.status(f"topics created: {', '.join(s.name for s in layout.specs().values())}")
    progress.status(f"control log genesis, {created.genesis.describe()}")
    report = DemoReport(
        bootstrap=cfg.bootstrap_servers,
        routed_topic=layout.name("routed"),
        workers=layout.workers,
        produced=demo.records,
    )

    events = list(input_events(demo.records, num_keys=demo.keys, z=demo.zipf, seed=demo.seed))
    half = len(events) // 2
    reduce = DemoReduce(cfg, layout, demo, events) if demo.reduce else None
    try:
        if reduce is not None:
            progress.status("starting the Spark reduce in this process (a local SparkSession)…")
            reduce.start()
            r = reduce.summary
            progress.status(
                f"reduce: query {r.job} up in {r.start_s:.1f} s (local[{r.local_cores}], one state "
                f"partition per routed partition, {r.processor}, watermark delay {r.watermark_delay}, "
                f"trigger {r.trigger})"
            )
        _produce(cfg, layout.name("input"), events[:half], progress, "producing the first half")
        progress.status(f"wrote {half:,} Avro input events (Zipf z={demo.zipf} over {demo.keys:,} keys)")
        flush = [flush_event(events)] if reduce is not None else []
        report.flush_events = len(flush)
        moves = _route(cfg, layout, demo, prefix, active, events, flush, report, progress, reduce)
        flush_routed_at = time.monotonic()
        progress.status("reading the routed topic back…")
        _check_routed(cfg, layout, events + flush, len(events), report)
        if reduce is not None and report.plan is not None:
            progress.status("reduce: waiting for the windows of every key (the flush event closes them)…")
            report.reduce = reduce.finish(moves, report.plan.epoch, progress.counter, flush_routed_at)
            r = report.reduce
            progress.status(
                f"reduce: {r.windows:,} windows on the output topic {r.drain_s:.1f} s after the flush, "
                f"{r.micro_batches} micro-batches; query and Spark stopped"
            )
    finally:
        if reduce is not None:
            reduce.close()
    return report


def _route(
    cfg: KafkaConfig,
    layout: TopicLayout,
    demo: DemoSettings,
    prefix: str,
    active: int,
    events: list[dict],
    flush: list[dict],
    report: DemoReport,
    progress: DemoProgress,
    reduce: DemoReduce | None = None,
) -> dict[str, tuple[int, int]]:
    """The router on the first half (epoch 0), the plan (epoch 1), the second half, then ``flush``;
    the plan waits for ``reduce`` to have read the first half.

    Returns the plan's pinned keys, each with (hash home, pinned worker).
    """
    half = len(events) // 2
    settings = RouterSettings(
        router_id="demo-router",
        group_id=f"{prefix}-routers",
        exactly_once=True,
        stats_interval_s=1.0,
        commit_interval_ms=300,
        heavy_hitters_top=demo.tracked_keys,
    )
    with RouterThread(Router.connect(settings, layout, cfg, active_workers=active)) as live:
        live.wait_offered(half, "routing the first half (epoch 0: Kafka's hash)")
        progress.status(f"router routed {live.totals.routed:,} records under epoch 0 (Kafka's murmur2 only)")
        if reduce is not None:
            reduce.wait_caught_up("the reduce reading the first half", demo.reduce_timeout_s)
            progress.status("reduce: read every routed record of epoch 0 (state built at the hash homes)")
        report.plan, moves = _rebalance(cfg, layout, demo.theta, live.totals.routed, progress)
        wait_until(lambda: live.epoch >= report.plan.epoch, 60, "the router applying the new epoch")
        _produce(cfg, layout.name("input"), events[half:], progress, "producing the second half")
        live.wait_offered(len(events), "routing the second half (epoch 1: Mixed table)")
        if flush:
            # only now: a record routed after it would be behind the watermark it raises
            _produce(cfg, layout.name("input"), flush, progress, "producing the flush event")
            live.wait_offered(len(events) + len(flush), "routing the flush event")
    totals = live.totals
    report.routed, report.markers = totals.routed, totals.markers
    report.transactions, report.dead_lettered = totals.transactions, totals.dead_lettered
    return moves


def _produce(cfg: KafkaConfig, topic: str, events: list[dict], progress: DemoProgress, label: str) -> None:
    codec = AvroCodec("io.ballast.InputEvent")
    with progress.counter(label, len(events)) as advance:
        produce_all(
            make_producer(cfg),
            topic,
            ((e["key"].encode(), codec.encode(e)) for e in events),
            on_progress=advance,
        )


class RouterThread:
    """A router running in a thread for the length of a ``with`` block.

    On exit the router is stopped (it commits its open transaction), the thread joined, a failure
    inside the router re-raised, and the router dropped, so its clients are gone before anything
    (a stack) is stopped after the block.
    """

    def __init__(self, router: Router) -> None:
        self.router: Router | None = router
        self.failure: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="router", daemon=True)
        self.totals = router.totals

    def _run(self) -> None:
        try:
            self.router.run()  # type: ignore[union-attr]
        except BaseException as exc:  # surfaced in the caller's thread
            self.failure = exc

    def __enter__(self) -> RouterThread:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.router is not None:
            self.router.stop()
        self.thread.join(60)
        self.totals = self.router.totals if self.router is not None else self.totals
        self.router = None
        if self.failure is not None and exc[0] is None:
            raise self.failure

    @property
    def epoch(self) -> int:
        self._raise_failure()
        return self.router.state.epoch if self.router is not None else -1

    def _raise_failure(self) -> None:
        if self.failure is not None:
            raise self.failure

    def wait_offered(self, offered: int, what: str) -> None:
        def done() -> bool:
            self._raise_failure()
            return self.totals.offered >= offered

        wait_until(done, 120, what, describe=lambda: f"{self.totals.offered:,} of {offered:,} offered")


def _rebalance(
    cfg: KafkaConfig, layout: TopicLayout, theta: float, routed: int, progress: DemoProgress
) -> tuple[PlanSummary, dict[str, tuple[int, int]]]:
    """The controller's planning round, once: router load from the metrics topic -> Mixed plan -> epoch.

    Also returns each pinned key's (hash home, pinned worker): the keys the reduce must move.
    """
    writer = ControlLogWriter(cfg, layout.name("control"), issuer="ballast-demo")
    try:
        # the hash spreads keys over the active workers only (the log's, from its genesis on); the
        # routers count per routed partition
        workers = writer.current_state().num_workers
        # until the statistics cover what the router routed: it publishes one every second, busy
        # or not, so a read until the topic stays quiet (1.5 s) would last its whole time-out
        load = read_router_load(cfg, layout.name("metrics"), workers, records=routed)
        plan = plan_from_load(load, workers, theta)
        assign = {k.decode(): w for k, w in plan.table.items()}
        event = writer.send(*routing_update(assign, reason="demo: Mixed plan from router heavy hitters"))
    finally:
        writer.close()
    progress.status(
        f"control log epoch {event['epoch']}: ROUTING_UPDATE pins {len(assign)} keys "
        f"(Mixed plan from {len(load.heavy_hitters):,} heavy hitters)"
    )
    moves = {k: (kafka_partition(k.encode(), workers), w) for k, w in assign.items()}
    return PlanSummary(
        epoch=int(event["epoch"]),
        pinned_keys=len(assign),
        heavy_hitters=len(load.heavy_hitters),
        plan_time_ms=plan.plan_time_s * 1000,
        predicted_max_mean=float(plan.predicted_loads.max() / plan.predicted_loads.mean()),
        feasible=plan.feasible,
    ), moves


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
