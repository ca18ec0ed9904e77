"""``make bench-router-startup``: how long a router takes to start on a long control log.

Starts its own broker (free ports, temp folder, as ``make bench-router`` does) and, for each log
size S (default 1,000 / 5,000 / 20,000 / 50,000 events), creates two deployments whose control
logs hold the genesis, then 10 ROUTING_UPDATEs pinning 1,000 keys each (a 10,000-key table), then
ROUTING_UPDATEs moving 5 pinned keys each up to epoch S:

* ``snapshots``: with a TABLE_SNAPSHOT every 1,000 epochs, as ``ControlLogWriter`` writes them;
* ``bare``: no snapshot after the genesis (a log written by something that never snapshots).

The logs are written by a bench-only bulk writer (2,000 events per transaction, the control
writer's transactional id); every event is folded before it is written, so the log is valid.
Measured (median of ``--repeats``):

* ``old``: the algorithm before this change, fold from offset 0 with the pure ``apply_event``
  (O(table) per event), on the ``bare`` log. It is stopped after ``--old-budget-s`` seconds and
  extrapolated linearly (the table has its 10,000 keys from epoch 10 on, so each event costs the
  same); it ran under a 30 s limit, so beyond that a router did not start at all.
* ``full``: ``ControlLogReader(start_offset=0).read_to_end()``, the new fold from the genesis
  (StateBuilder), on the ``bare`` log: the worst case of the new reader.
* ``latest``: ``ControlLogReader().read_to_end()``, from the latest snapshot, ``snapshots`` log.
* ``router``: ``Router.connect()`` until the router is ready (clients, genesis check, fold,
  subscription), on the ``snapshots`` log. The router runs as a ``ballast router run`` process
  started through the local stack's supervisor; it announces this time itself (``startup_s`` in
  its ready file), so the figure leaves out the interpreter's start and imports.

Writes bench/results/router_startup.json and router_startup.png.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import FOREVER, ROOT

from ballast.avro.codec import AvroCodec
from ballast.control.log import SNAPSHOT_EVERY, ControlLogReader
from ballast.control.state import (
    CONTROL_SCHEMA,
    ControlState,
    StateBuilder,
    apply_event,
    initial_state,
    make_event,
    routing_update,
    table_snapshot,
)
from ballast.control.writer import writer_transactional_id
from ballast.deployment.create import create_deployment
from ballast.devstack.stack import start_stack, stop_stack
from ballast.harness.pipeline import Pipeline
from ballast.kafka.clients import produce_waiting
from ballast.kafka.configuration import KafkaConfig
from ballast.kafka.topics import TopicLayout
from ballast.readiness import read_ready
from ballast.routing.murmur2 import kafka_partition
from ballast.workload import key_name

WORKERS = 8
TABLE_KEYS = 10_000
PER_TRANSACTION = 2_000
OLD_LIMIT_S = 30.0  # the old reader's overall limit


def log(msg: str) -> None:
    print(f"[bench-router-startup {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def control_events(size: int, snapshot_every: int) -> Iterator[dict]:
    """Epochs 1..size (and snapshots when due), each folded before it is handed out: a valid log."""
    builder = StateBuilder(initial_state(WORKERS))
    builder.apply(make_event(0, "TABLE_SNAPSHOT", table_snapshot(initial_state(WORKERS))[1], issued_at=0))
    keys = [key_name(i) for i in range(TABLE_KEYS)]
    home = [kafka_partition(k.encode(), WORKERS) for k in keys]
    last_snapshot = 0

    def away(i: int, shift: int) -> int:  # a worker other than the key's hash home: a real entry
        return (home[i] + 1 + shift % (WORKERS - 1)) % WORKERS

    epoch = 0
    while epoch < size:
        epoch += 1
        if epoch <= 10:
            block = range((epoch - 1) * 1_000, epoch * 1_000)
            assign = {keys[i]: away(i, 0) for i in block}
        else:
            assign = {
                keys[(epoch * 5 + j) % TABLE_KEYS]: away((epoch * 5 + j) % TABLE_KEYS, epoch)
                for j in range(5)
            }
        event = make_event(epoch, *routing_update(assign, reason="bench"), issuer="bench", issued_at=epoch)
        builder.apply(event)
        yield event
        if snapshot_every and epoch - last_snapshot >= snapshot_every and epoch < size:
            epoch += 1
            snap = make_event(epoch, *table_snapshot(builder.state()), issuer="bench", issued_at=epoch)
            builder.apply(snap)
            last_snapshot = epoch
            yield snap
    assert len(builder.state().table) == TABLE_KEYS


def bulk_write(kafka: KafkaConfig, topic: str, events: Iterator[dict]) -> int:
    """Many events per transaction, fenced like any control writer; returns the events written."""
    codec = AvroCodec(CONTROL_SCHEMA)
    producer = Producer(
        kafka.producer(**{"transactional.id": writer_transactional_id(topic), "linger.ms": 20})
    )
    producer.init_transactions(30)
    written = 0
    in_txn = False
    for event in events:
        if not in_txn:
            producer.begin_transaction()
            in_txn = True
        produce_waiting(producer, topic, codec.encode(event), str(event["epoch"]).encode())
        written += 1
        if written % PER_TRANSACTION == 0:
            producer.commit_transaction(60)
            in_txn = False
    if in_txn:
        producer.commit_transaction(60)
    producer.flush(30)
    return written


def old_fold(kafka: KafkaConfig, topic: str, budget_s: float) -> tuple[float, int, int]:
    """The reader before this change: from offset 0, the pure fold per event. Returns (seconds,
    events folded, events in the log); stops after ``budget_s``."""
    consumer = Consumer(kafka.consumer(f"bench-old-{uuid.uuid4().hex[:8]}", **{"fetch.wait.max.ms": 50}))
    codec = AvroCodec(CONTROL_SCHEMA)
    tp = TopicPartition(topic, 0)
    t0 = time.perf_counter()
    _low, high = consumer.get_watermark_offsets(tp, timeout=10, cached=False)
    consumer.assign([TopicPartition(topic, 0, 0)])
    state: ControlState = initial_state(WORKERS)
    folded = 0
    try:
        while consumer.position([tp])[0].offset < high and time.perf_counter() - t0 < budget_s:
            for m in consumer.consume(1000, timeout=0.2):
                if m.error() is None:
                    state = apply_event(state, codec.decode(m.value()))
                    folded += 1
                if time.perf_counter() - t0 >= budget_s:
                    break
        elapsed = time.perf_counter() - t0
    finally:
        consumer.close()
    return elapsed, folded, state.epoch


def reader_time(kafka: KafkaConfig, topic: str, start_offset: int | None) -> tuple[float, int]:
    """Seconds for a new reader's read_to_end (constructor included), and the epoch it reached."""
    t0 = time.perf_counter()
    reader = ControlLogReader(kafka, topic, initial_state(WORKERS), start_offset=start_offset)
    try:
        reader.read_to_end(timeout=30)
        return time.perf_counter() - t0, reader.state.epoch
    finally:
        reader.close()


def router_time(kafka: KafkaConfig, layout: TopicLayout, folder: Path) -> tuple[float, int]:
    """Seconds from ``Router.connect()`` to ready, and the epoch the router starts at, as a
    ``ballast router run`` process announces them in its ready file (its service folder in
    ``folder``)."""
    with Pipeline(kafka, layout, folder, create=False) as pipe:
        command = pipe.router(f"startup-{uuid.uuid4().hex[:6]}", group_id=f"bench-{uuid.uuid4().hex[:8]}")
        service = pipe.start(command, wait=True, timeout=FOREVER)
        announced = read_ready(service.ready_file)
        code = pipe.stop(command.name)
    if announced is None or "startup_s" not in announced:
        raise RuntimeError(f"router {command.name} announced no start-up time: {announced}")
    if code != 0:
        raise RuntimeError(f"router {command.name} exited {code} when stopped")
    return float(announced["startup_s"]), int(announced["epoch"])


def median_of(repeats: int, measure: Callable[[], tuple[float, int]]) -> tuple[float, int]:
    runs = [measure() for _ in range(repeats)]
    return round(statistics.median(t for t, _ in runs), 3), runs[0][1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,5000,20000,50000", help="control log sizes (events)")
    ap.add_argument("--repeats", type=int, default=3, help="runs per new measurement (median kept)")
    ap.add_argument("--old-budget-s", type=float, default=20.0, help="time the old fold gets per size")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "router_startup.json"))
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    state_dir = Path(tempfile.mkdtemp(prefix="ballast-bench-startup-"))
    log(f"starting a broker in {state_dir}")
    stack = start_stack(state_dir, brokers=1)
    results = []
    try:
        kafka = KafkaConfig.plaintext(stack.bootstrap, "bench-router-startup")
        for size in sizes:
            row: dict = {"events": size}
            logs = {}
            for kind, every in (("bare", 0), ("snapshots", SNAPSHOT_EVERY)):
                layout = TopicLayout(prefix=f"startup-{kind}-{size}", workers=WORKERS, input_partitions=1)
                create_deployment(kafka, layout, issuer="bench")
                t0 = time.perf_counter()
                n = bulk_write(kafka, layout.name("control"), control_events(size, every))
                took = time.perf_counter() - t0
                log(f"{size:,} events: wrote the {kind} log ({n:,} events) in {took:.1f} s")
                logs[kind] = layout
            bare, snaps = logs["bare"].name("control"), logs["snapshots"].name("control")

            elapsed, folded, epoch = old_fold(kafka, bare, args.old_budget_s)
            complete = folded >= size + 1
            assert epoch == size or not complete
            row["old_s"] = round(elapsed if complete else elapsed * (size + 1) / max(folded, 1), 3)
            row["old_extrapolated"] = not complete
            row["old_folded"] = folded
            how = "measured" if complete else f"extrapolated from {folded:,} events in {elapsed:.1f} s"
            log(f"{size:,} events: old fold from offset 0: {row['old_s']:,.1f} s ({how})")

            row["full_s"], reached = median_of(args.repeats, lambda t=bare: reader_time(kafka, t, 0))
            assert reached == size, (reached, size)
            log(f"{size:,} events: new fold from the genesis (no snapshots): {row['full_s']:.2f} s")
            row["latest_s"], reached = median_of(args.repeats, lambda t=snaps: reader_time(kafka, t, None))
            row["epochs_with_snapshots"] = reached
            log(f"{size:,} events: new reader from the latest snapshot: {row['latest_s']:.2f} s")
            row["router_s"], reached_router = median_of(
                args.repeats, lambda lay=logs["snapshots"]: router_time(kafka, lay, state_dir)
            )
            assert reached_router == reached
            log(f"{size:,} events: Router.connect() -> ready: {row['router_s']:.2f} s")
            results.append(row)
        report = {
            "workers": WORKERS,
            "table_keys": TABLE_KEYS,
            "snapshot_every": SNAPSHOT_EVERY,
            "events_per_transaction": PER_TRANSACTION,
            "repeats": args.repeats,
            "old_budget_s": args.old_budget_s,
            "old_limit_s": OLD_LIMIT_S,
            "target_s": 5.0,
            "notes": (
                "old: fold from offset 0 with the pure apply_event on the log without snapshots, "
                "extrapolated linearly when it did not finish within old_budget_s; full: the new reader "
                "from the genesis on the same log; latest: the new reader from the latest snapshot on the "
                "log with a snapshot every snapshot_every epochs; router: Router.connect() to ready on "
                "that log, as a `ballast router run` process announces it (startup_s in its ready "
                "file). Seconds, median of `repeats` (old: one run)."
            ),
            "results": results,
        }
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=2) + "\n")
        plot(results, out.with_suffix(".png"))
        print()
        print(f"{'events':>8}{'old s':>12}{'full s':>9}{'latest s':>10}{'router s':>10}")
        for r in results:
            old = f"{r['old_s']:,.1f}{'*' if r['old_extrapolated'] else ''}"
            print(
                f"{r['events']:>8,}{old:>12}{r['full_s']:>9.2f}{r['latest_s']:>10.2f}{r['router_s']:>10.2f}"
            )
        print("* extrapolated")
        log(f"wrote {out}")
    finally:
        stop_stack(state_dir, purge=True)
    return 0


def plot(results: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = [r["events"] for r in results]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(x, [r["old_s"] for r in results], "o--", label="old: fold from offset 0 (extrapolated)")
    ax.plot(x, [r["full_s"] for r in results], "s-", label="new: fold from the genesis")
    ax.plot(x, [r["latest_s"] for r in results], "^-", label="new: from the latest snapshot")
    ax.plot(x, [r["router_s"] for r in results], "d-", label="router: connect() to ready")
    ax.axhline(OLD_LIMIT_S, color="grey", linewidth=0.8, linestyle=":", label="old 30 s limit")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("control log events")
    ax.set_ylabel("seconds")
    ax.set_title("Router start-up vs control log size (10,000-key table)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    sys.exit(main())
