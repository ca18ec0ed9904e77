"""``make demo``: the main job on the embedded local stack.

It runs the part of Ballast that exists, live, on a local KRaft broker it starts and stops:

1. creates Ballast's topics and writes Zipf-skewed Avro input events (Java's murmur2 partitioner);
2. runs the **router** (exactly-once) on the first half: every key follows Kafka's hash, and the
   router publishes per-worker counts and heavy hitters to the metrics topic;
3. reads those metrics from Kafka, plans a routing table with the **Mixed** planner and appends it to
   the **control log** as epoch 1 (a stand-in for the controller, which a later issue builds);
4. the router applies epoch 1 at a transaction boundary, writes its epoch markers, and routes the
   second half with the table;
5. reads the routed topic (read_committed) and checks every input record arrived exactly once,
   then shows each worker's load under epoch 0 (hash) and epoch 1 (Mixed).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
from confluent_kafka import TopicPartition
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from ballast.avro.codec import AvroCodec
from ballast.control.log import ControlLogWriter, ControlState, routing_update
from ballast.devstack.stack import start_stack, stop_stack
from ballast.kafka.clients import consume_exactly, make_admin, make_consumer, make_producer, produce_all
from ballast.kafka.config import KafkaConfig
from ballast.kafka.topics import TopicLayout, ensure_topics
from ballast.workload import input_events

console = Console()


def _produce(cfg: KafkaConfig, topic: str, events: list[dict], codec: AvroCodec, label: str) -> None:
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task(label, total=len(events))
        produce_all(
            make_producer(cfg),
            topic,
            ((e["key"].encode(), codec.encode(e)) for e in events),
            on_progress=lambda n: progress.update(task, completed=n),
        )


def _wait(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"demo: {what} did not happen within {timeout:.0f}s")
        time.sleep(0.05)


def _read_router_metrics(cfg: KafkaConfig, topic: str, workers: int) -> tuple[np.ndarray, Counter[str]]:
    """Sum every RouterKeyStats record on the metrics topic: per-worker records and heavy hitters."""
    codec = AvroCodec("io.ballast.MetricsRecord")
    consumer = make_consumer(cfg, f"ballast-demo-metrics-{uuid.uuid4().hex[:8]}")
    consumer.assign([TopicPartition(topic, 0, 0)])
    per_worker = np.zeros(workers)
    heavy: Counter[str] = Counter()
    for m in consume_exactly(consumer, 10**9, timeout=10, idle_timeout=1.5):
        branch, body = codec.decode(m.value(), m.topic(), m.partition(), m.offset())["body"]
        if branch != "io.ballast.RouterKeyStats":
            continue
        per_worker += np.asarray(body["worker_records"][:workers], dtype=np.float64)
        for hh in body["heavy_hitters"]:
            heavy[hh["key"]] += hh["count"]
    consumer.close()
    return per_worker, heavy


def _plan_from_metrics(per_worker: np.ndarray, heavy: Counter[str], workers: int, theta: float):
    """What the controller will do: heavy hitters are the tracked keys, the rest is cold load."""
    from ballast.planner.mixed import MixedPlanner
    from ballast.planner.stats import KeyStats

    keys = [k.encode() for k in heavy]
    cost = np.array([heavy[k] for k in heavy], dtype=np.float64)
    probe = KeyStats.from_bytes_keys(keys, cost, cost.copy(), workers)
    hot_per_worker = np.bincount(probe.home, weights=cost, minlength=workers)
    cold = np.maximum(per_worker - hot_per_worker, 0.0)  # sketch counts may overestimate a little
    stats = KeyStats.from_bytes_keys(keys, cost, cost.copy(), workers, cold_load=cold, cold_mem=cold)
    return MixedPlanner(theta_max=theta).plan(stats, {})


def run(args: argparse.Namespace) -> int:
    from services.router.config import RouterConfig
    from services.router.router import Router

    state_dir = Path(args.state_dir or tempfile.mkdtemp(prefix="ballast-demo-"))
    started = False
    bootstrap = args.bootstrap
    router: Router | None = None
    thread: threading.Thread | None = None
    try:
        if not bootstrap:
            with console.status("starting a local Kafka broker (KRaft)…"):
                state = start_stack(state_dir, brokers=1)
            started, bootstrap = True, state.bootstrap
            console.print(f"[green]broker up[/] at {bootstrap} (state and logs in {state_dir})")
        cfg = KafkaConfig(bootstrap_servers=bootstrap, client_id="ballast-demo")
        prefix = args.prefix or f"demo-{uuid.uuid4().hex[:6]}"
        layout = TopicLayout(prefix=prefix, workers=args.workers)
        ensure_topics(make_admin(cfg), layout.specs())
        console.print(f"topics created: {', '.join(s.name for s in layout.specs().values())}")

        codec = AvroCodec("io.ballast.InputEvent")
        events = list(input_events(args.records, num_keys=args.keys, z=args.zipf, seed=args.seed))
        half = len(events) // 2
        _produce(cfg, layout.name("input"), events[:half], codec, "producing the first half")
        console.print(f"wrote {half:,} Avro input events (Zipf z={args.zipf} over {args.keys:,} keys)")

        router = Router(
            RouterConfig(
                router_id="demo-router",
                prefix=prefix,
                group_id=f"{prefix}-routers",
                exactly_once=True,
                stats_interval_s=1.0,
                commit_interval_ms=300,
                # Track many keys: to make room for the hottest key the planner must move medium
                # keys too, and it can only move keys it sees (untracked load stays where it is).
                heavy_hitters_top=args.tracked_keys,
            ),
            cfg,
        )
        thread = threading.Thread(target=router.run, name="router", daemon=True)
        thread.start()
        with console.status("router: routing epoch 0 (hash only)…"):
            _wait(lambda: router.totals.offered >= half, 120, "routing the first half")
            time.sleep(2.5)  # let at least one more statistics interval reach the metrics topic
        console.print(f"router routed {router.totals.routed:,} records under epoch 0 (Kafka's murmur2 only)")

        per_worker, heavy = _read_router_metrics(cfg, layout.name("metrics"), args.workers)
        plan = _plan_from_metrics(per_worker, heavy, args.workers, args.theta)
        assign = {k.decode(): w for k, w in plan.table.items()}
        writer = ControlLogWriter(
            cfg,
            layout.name("control"),
            ControlState(num_workers=args.workers, max_workers=args.workers),
            transactional_id=f"{prefix}-controller",
            issuer="ballast-demo",
        )
        event = writer.send(*routing_update(assign, reason="demo: Mixed plan from router heavy hitters"))
        writer.close()
        console.print(
            f"control log epoch {event['epoch']}: ROUTING_UPDATE pins {len(assign)} keys "
            f"(Mixed plan from {len(heavy):,} heavy hitters in {plan.plan_time_s * 1000:.1f} ms, "
            f"predicted max/mean {plan.predicted_loads.max() / plan.predicted_loads.mean():.2f}"
            + ("" if plan.feasible else ", infeasible: best effort")
            + ")"
        )
        _wait(lambda: router.state.epoch >= event["epoch"], 60, "the router applying the new epoch")

        _produce(cfg, layout.name("input"), events[half:], codec, "producing the second half")
        with console.status("router: routing epoch 1 (Mixed table)…"):
            _wait(lambda: router.totals.offered >= len(events), 120, "routing the second half")
        router.stop()
        thread.join(60)
        totals = router.totals
        console.print(
            f"router: {totals.routed:,} routed, {totals.markers} epoch markers, "
            f"{totals.transactions} transactions, {totals.dead_lettered} dead-lettered"
        )
        return _verify_and_show(cfg, layout, events, args)
    finally:
        if router is not None and thread is not None and thread.is_alive():
            router.stop()
            thread.join(60)
        if started and not args.keep:
            stop_stack(state_dir, purge=args.state_dir is None)
            console.print("local stack stopped")


def _verify_and_show(
    cfg: KafkaConfig, layout: TopicLayout, events: list[dict], args: argparse.Namespace
) -> int:
    """Read the routed topic back and compare with what the demo itself produced."""
    envelope = AvroCodec("io.ballast.RoutedEnvelope")
    consumer = make_consumer(cfg, f"ballast-demo-check-{uuid.uuid4().hex[:8]}")
    consumer.subscribe([layout.name("routed")])
    msgs = consume_exactly(consumer, len(events) + 10**6, timeout=120, idle_timeout=3)
    consumer.close()
    load: dict[int, Counter[int]] = defaultdict(Counter)
    seqs: Counter[int] = Counter()
    markers = 0
    for m in msgs:
        branch, body = envelope.decode(m.value(), m.topic(), m.partition(), m.offset())["body"]
        if branch == "io.ballast.EpochMarker":
            markers += 1
            continue
        load[body["epoch"]][m.partition()] += 1
        seqs[int.from_bytes(body["payload"][:8], "big")] += 1
    missing = sum(1 for i in range(len(events)) if seqs[i] == 0)
    duplicated = sum(c - 1 for c in seqs.values() if c > 1)

    table = Table(title=f"{layout.name('routed')}: records per worker and routing epoch")
    table.add_column("worker")
    for epoch in sorted(load):
        table.add_column(f"epoch {epoch}" + (" (hash)" if epoch == 0 else " (Mixed)"), justify="right")
    for w in range(args.workers):
        table.add_row(str(w), *(f"{load[e][w]:,}" for e in sorted(load)))
    ratios = []
    for e in sorted(load):
        counts = np.array([load[e][w] for w in range(args.workers)], dtype=np.float64)
        ratios.append(f"{counts.max() / counts.mean():.2f}" if counts.sum() else "-")
    table.add_row("max/mean", *ratios, style="bold")
    console.print(table)
    console.print(
        f"routed topic: {sum(seqs.values()):,} data records, {markers} epoch markers; "
        f"missing {missing}, duplicated {duplicated}"
    )
    ok = missing == 0 and duplicated == 0 and len(load) >= 2
    console.print("[green]demo OK: every record routed exactly once[/]" if ok else "[red]demo FAILED[/]")
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="ballast-demo", description=__doc__.splitlines()[0])
    p.add_argument("--bootstrap", help="use this cluster instead of starting a local broker")
    p.add_argument("--state-dir", help="keep the local stack here (default: a temporary folder)")
    p.add_argument("--keep", action="store_true", help="leave the local stack running afterwards")
    p.add_argument("--records", type=int, default=100_000)
    p.add_argument("--keys", type=int, default=10_000)
    p.add_argument("--zipf", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--prefix", default=None, help="topic prefix (default: a fresh demo-XXXXXX)")
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--theta", type=float, default=0.08, help="imbalance tolerance given to the Mixed planner")
    p.add_argument("--tracked-keys", type=int, default=2000, help="heavy hitters the router publishes")
    return run(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
