"""``make demo``: the main job on the embedded local stack.

Today it runs the part of the pipeline that exists: start a local KRaft broker, create Ballast's
topics, write Zipf-skewed Avro input events with Java's murmur2 partitioner, read them back
(read_committed) and check every one arrived once with its content, then show how skewed the
input is. Later issues grow it (router, controller, Spark job).
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from ballast.clients import consume_exactly, make_admin, make_consumer, make_producer, produce_all
from ballast.codec import AvroCodec
from ballast.config import KafkaConfig
from ballast.localstack import start_stack, stop_stack
from ballast.topics import TopicLayout, ensure_topics
from ballast.workload import input_events

console = Console()


def _digest(key: bytes | None, value: bytes) -> bytes:
    return hashlib.blake2b((key or b"") + b"\0" + value, digest_size=16).digest()


def run(args: argparse.Namespace) -> int:
    state_dir = Path(args.state_dir or tempfile.mkdtemp(prefix="ballast-demo-"))
    started = False
    bootstrap = args.bootstrap
    try:
        if not bootstrap:
            with console.status("starting a local Kafka broker (KRaft)…"):
                state = start_stack(state_dir, brokers=1)
            started, bootstrap = True, state.bootstrap
            console.print(f"[green]broker up[/] at {bootstrap} (state and logs in {state_dir})")
        cfg = KafkaConfig(bootstrap_servers=bootstrap, client_id="ballast-demo")
        layout = TopicLayout(prefix=args.prefix, workers=args.workers)
        created = ensure_topics(make_admin(cfg), layout.specs())
        console.print("topics: " + ", ".join(f"{n} ({w})" for n, w in created.items()))

        codec = AvroCodec("io.ballast.InputEvent")
        topic = layout.name("input")
        sent_digests: Counter[bytes] = Counter()
        keys: Counter[str] = Counter()

        def records():
            for ev in input_events(args.records, num_keys=args.keys, z=args.zipf, seed=args.seed):
                key, value = ev["key"].encode(), codec.encode(ev)
                sent_digests[_digest(key, value)] += 1
                keys[ev["key"]] += 1
                yield key, value

        t0 = time.perf_counter()
        with Progress(console=console, transient=True) as progress:
            task = progress.add_task("producing", total=args.records)
            produce_all(
                make_producer(cfg), topic, records(), on_progress=lambda n: progress.update(task, completed=n)
            )
        produce_s = time.perf_counter() - t0

        consumer = make_consumer(cfg, f"ballast-demo-{time.time_ns()}")
        consumer.subscribe([topic])
        t0 = time.perf_counter()
        msgs = consume_exactly(consumer, args.records, timeout=180)
        consume_s = time.perf_counter() - t0
        consumer.close()

        got = Counter(_digest(m.key(), m.value()) for m in msgs)
        per_partition = Counter(m.partition() for m in msgs)
        decoded_ok = sum(1 for m in msgs if codec.decode(m.value(), m.topic(), m.partition(), m.offset()))
        missing = sum((sent_digests - got).values())
        extra = sum((got - sent_digests).values())

        table = Table(
            title=f"{topic}: {args.records:,} Avro records, Zipf z={args.zipf} over {args.keys:,} keys"
        )
        table.add_column("partition")
        table.add_column("records", justify="right")
        table.add_column("share", justify="right")
        for p in sorted(per_partition):
            table.add_row(str(p), f"{per_partition[p]:,}", f"{per_partition[p] / len(msgs):.1%}")
        console.print(table)
        hot = ", ".join(f"{k} ({c:,})" for k, c in keys.most_common(5))
        console.print(f"hottest keys: {hot}")
        console.print(
            f"produced in {produce_s:.1f}s ({args.records / produce_s:,.0f}/s), "
            f"consumed in {consume_s:.1f}s; decoded {decoded_ok:,}; missing {missing}, duplicated {extra}"
        )
        show_balance_preview(keys, args.workers, args.theta)
        ok = missing == 0 and extra == 0 and decoded_ok == args.records
        console.print("[green]round trip OK[/]" if ok else "[red]round trip FAILED[/]")
        return 0 if ok else 1
    finally:
        if started and not args.keep:
            stop_stack(state_dir, purge=args.state_dir is None)
            console.print("local stack stopped")


def show_balance_preview(keys: Counter[str], workers: int, theta: float) -> None:
    """What the router would face: per-worker load under Kafka's hash alone vs a Mixed plan.

    Uses the real key counts just produced and the planner the controller will call; it routes
    nothing yet (the router issue grows the demo into the live pipeline).
    """
    import numpy as np

    from ballast.planner.mixed import MixedPlanner
    from ballast.planner.stats import KeyStats, imbalance

    names = [k.encode() for k in keys]
    cost = np.array([keys[k] for k in keys], dtype=np.float64)
    stats = KeyStats.from_bytes_keys(names, cost, cost.copy(), workers)
    plan = MixedPlanner(theta_max=theta).plan(stats, {})
    hash_loads = stats.loads(stats.home)
    table = Table(title=f"balance preview over {workers} workers (Mixed planner, theta_max={theta})")
    table.add_column("worker")
    table.add_column("hash only", justify="right")
    table.add_column("mixed", justify="right")
    for w in range(workers):
        table.add_row(str(w), f"{hash_loads[w]:,.0f}", f"{plan.predicted_loads[w]:,.0f}")
    table.add_row(
        "max/mean", f"{imbalance(hash_loads):.2f}", f"{imbalance(plan.predicted_loads):.2f}", style="bold"
    )
    console.print(table)
    console.print(
        f"Mixed routes {plan.key_entries} of {len(names):,} keys by table, the rest by murmur2; "
        f"plan took {plan.plan_time_s * 1000:.1f} ms"
        + ("" if plan.feasible else f"; infeasible keys (heavier than the cap): {len(plan.infeasible_keys)}")
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="ballast-demo", description=__doc__.splitlines()[0])
    p.add_argument("--bootstrap", help="use this cluster instead of starting a local broker")
    p.add_argument("--state-dir", help="keep the local stack here (default: a temporary folder)")
    p.add_argument("--keep", action="store_true", help="leave the local stack running afterwards")
    p.add_argument("--records", type=int, default=100_000)
    p.add_argument("--keys", type=int, default=10_000)
    p.add_argument("--zipf", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--prefix", default="ballast")
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--theta", type=float, default=0.08, help="imbalance tolerance for the balance preview")
    return run(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
