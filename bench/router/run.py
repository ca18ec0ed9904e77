"""``make bench-router``: the router vs a bare confluent-kafka consume→produce loop, both delivery modes.

Starts its own broker (free ports, temp folder), preloads N records of 100-byte payloads with Zipf
keys into a 4-partition input topic, then runs, one after the other over the same input: bare ALO,
router ALO, bare EOS, router EOS (fresh consumer group each). The router runs as users run it, a
``ballast router run`` process started through the local stack's supervisor (the harness's
:class:`~ballast.harness.pipeline.Pipeline`); the bare loop runs in a thread of this process.

Throughput is measured from outside, the same way for both loops: N records over the time from the
first record the loop wrote (the earliest LogAppendTime, stamped by the broker, among the output's
first data records of this run; epoch markers do not count) to the moment the loop's group has
committed all N input offsets (polled every 20 ms with one long-lived client). So it covers routing
and the commit of the last records, not the router's start-up (``make bench-router-startup``).
Latency is the routed record's LogAppendTime minus the input record's CreateTime on a 1 % sample,
measured in a separate phase in which the input arrives at a steady rate (see ``paced_producer``),
starting once the loop consumes (the bare loop has its partitions; the router has announced epoch 0
in every routed partition), so neither loop's start-up is counted as latency.
Writes bench/results/router.json and router.png.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import numpy as np
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from ballast.avro.codec import AvroCodec
from ballast.avro.wire import DATA_PREFIX, INPUT_HEADER, encode_input_body
from ballast.deployment.create import create_deployment
from ballast.devstack.stack import start_stack, stop_stack
from ballast.harness.pipeline import Pipeline
from ballast.kafka.admin import ensure_topics, make_admin
from ballast.kafka.clients import produce_all
from ballast.kafka.configuration import KafkaConfig
from ballast.kafka.groups import GroupOffsets
from ballast.kafka.topics import TopicLayout, TopicSpec
from ballast.waiting import wait_until
from ballast.workload import key_name, zipf_key_ids

ROOT = Path(__file__).resolve().parents[2]
BATCH = 10_000
COMMIT_MS = 500
APPEND_TIME = {"message.timestamp.type": "LogAppendTime"}
FOREVER = 3600.0  # the benchmark has no deadline of its own; a stuck run ends here
PROBE_INTERVAL_S = 0.02  # how often the group's committed offsets are asked for


def log(msg: str) -> None:
    print(f"[bench-router {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def input_records(n: int, keys: int):
    """The benchmark's input: Zipf(1.0) keys, 100-byte payloads starting with the sequence number."""
    ids = zipf_key_ids(n, keys, 1.0, seed=42)
    names = [key_name(i).encode() for i in range(keys)]
    filler = bytes(range(92))
    for i in range(n):
        k = names[ids[i]]
        body = encode_input_body(k, 1.0, i.to_bytes(8, "big") + filler, 1_767_225_600_000 + i)
        yield k, INPUT_HEADER + body


def preload(kafka: KafkaConfig, topic: str, n: int, keys: int) -> None:
    produce_all(
        Producer(kafka.producer()),
        topic,
        input_records(n, keys),
        on_progress=lambda s: s % 200_000 == 0 and log(f"preloaded {s}"),
    )


def paced_producer(kafka: KafkaConfig, topic: str, n: int, keys: int, rate: float) -> threading.Thread:
    """Produce ``n`` records at ``rate`` records/s in a thread (CreateTime = the moment of produce()).

    Why: latency measured on a preloaded backlog is queueing time; at a steady rate below both
    loops' capacity it is the time a record spends in the pipeline.
    """

    def run() -> None:
        t0 = time.perf_counter()
        step = 500  # records per tick
        records = input_records(n, keys)
        prod = Producer(kafka.producer(**{"linger.ms": 1}))
        for sent, (key, value) in enumerate(records, 1):
            prod.produce(topic, value, key)
            if sent % step == 0:
                prod.poll(0)
                ahead = sent / rate - (time.perf_counter() - t0)
                if ahead > 0:
                    time.sleep(ahead)
        prod.flush(60)

    th = threading.Thread(target=run, daemon=True)
    th.start()
    return th


def end_offsets(kafka: KafkaConfig, topic: str) -> dict[int, int]:
    """Each partition's end (high watermark): where this run's records will start. Asked again
    while the broker cannot answer yet (a topic just created has no leader for a moment)."""
    probe = Consumer(kafka.consumer(f"bench-ends-{uuid.uuid4().hex[:8]}"))

    def ask() -> dict[int, int] | None:
        try:
            parts = probe.list_topics(topic, timeout=10).topics[topic].partitions
            return {p: probe.get_watermark_offsets(TopicPartition(topic, p), 10, False)[1] for p in parts}
        except KafkaException:
            return None

    try:
        return wait_until(ask, 60, f"the end offsets of {topic}", 0.1)
    finally:
        probe.close()


def first_append_s(kafka: KafkaConfig, topic: str, start: dict[int, int], is_data) -> float:
    """The earliest broker append time (LogAppendTime, seconds) of the first data record after
    ``start`` in each partition: when the loop wrote its first record."""
    ends = end_offsets(kafka, topic)
    pending = {p for p, off in start.items() if ends.get(p, 0) > off}
    consumer = Consumer(kafka.consumer(f"bench-first-{uuid.uuid4().hex[:8]}"))
    consumer.assign([TopicPartition(topic, p, start[p]) for p in sorted(pending)])
    first: list[int] = []
    deadline = time.monotonic() + 120
    try:
        while pending and time.monotonic() < deadline:
            msgs = consumer.consume(1_000, 0.5)
            for m in msgs:
                p = m.partition()
                if m.error() is None and p in pending and is_data(m.value()):
                    first.append(m.timestamp()[1])
                    pending.discard(p)
                    consumer.pause([TopicPartition(topic, p)])
            if not msgs:  # read to the end without a data record (markers only): nothing to find
                for tp in consumer.position([TopicPartition(topic, p) for p in pending]):
                    if tp.offset >= ends[tp.partition]:
                        pending.discard(tp.partition)
    finally:
        consumer.close()
    if not first:
        raise RuntimeError(f"no record written to {topic} in this run")
    return min(first) / 1000


def committed_time(kafka: KafkaConfig, group: str, src: str, n: int, check=lambda: None) -> float:
    """The wall-clock moment ``group`` has committed ``n`` offsets of ``src`` (``check`` raises when
    the loop failed). One long-lived client asks: a client per check would steal CPU from the loop."""
    offsets = GroupOffsets(kafka.with_client_id("bench-probe"), group, src)
    last = [0]

    def reached() -> bool:
        check()
        last[0] = offsets.total()
        return last[0] >= n

    try:
        wait_until(
            reached, FOREVER, f"{n:,} input offsets committed", PROBE_INTERVAL_S, lambda: f"{last[0]:,}"
        )
        return time.time()
    finally:
        offsets.close()


def bare(
    kafka: KafkaConfig, src: str, dst: str, n: int, eos: bool, feed: Callable[[], object] | None = None
) -> float:
    """The reference loop, records/s: consume(batch) → produce(value) per record, same client settings,
    same commit cadence; run in a thread and measured like the router (module docstring). ``feed``
    is called once the loop has its partitions (it starts the input of the latency phase)."""
    group = f"bare-{uuid.uuid4().hex[:8]}"
    start = end_offsets(kafka, dst)
    failed: list[BaseException] = []
    assigned = threading.Event()

    def loop() -> None:
        try:
            bare_loop(kafka, src, dst, n, eos, group, assigned)
        except BaseException as exc:  # reported by the measuring thread
            failed.append(exc)

    def check() -> None:
        if failed:
            raise RuntimeError(f"the bare loop failed: {failed[0]!r}") from failed[0]

    th = threading.Thread(target=loop, daemon=True)
    th.start()
    if feed is not None:
        wait_until(lambda: check() or assigned.is_set(), FOREVER, "the bare loop's partitions", 0.01)
        feed()
    done = committed_time(kafka, group, src, n, check)
    th.join(60)
    check()
    return n / (done - first_append_s(kafka, dst, start, lambda v: True))


def bare_loop(
    kafka: KafkaConfig, src: str, dst: str, n: int, eos: bool, group: str, assigned: threading.Event
) -> None:
    """consume(batch) → produce(value, key) until ``n`` records, committing every COMMIT_MS
    (a transaction with the offsets under exactly-once; flush, then offsets, otherwise);
    ``assigned`` is set once the group gave it partitions."""
    cons = Consumer(kafka.consumer(group))
    extra = {"transactional.id": f"bare-{group}"} if eos else {}
    prod = Producer(kafka.producer(**extra))
    if eos:
        prod.init_transactions(30)
    cons.subscribe([src], on_assign=lambda _c, parts: parts and assigned.set())
    seen = 0
    in_txn = False
    last_commit = time.monotonic()
    while seen < n:
        msgs = cons.consume(BATCH, 0.1)
        if not msgs:
            continue
        if eos and not in_txn:
            prod.begin_transaction()
            in_txn = True
        for m in msgs:
            if m.error():
                continue
            try:
                prod.produce(dst, m.value(), m.key())
            except BufferError:
                prod.poll(0.05)
                prod.produce(dst, m.value(), m.key())
            seen += 1
        prod.poll(0)
        if time.monotonic() - last_commit >= COMMIT_MS / 1000 or seen >= n:
            last_commit = time.monotonic()
            pos = [tp for tp in cons.position(cons.assignment()) if tp.offset >= 0]
            if eos:
                prod.send_offsets_to_transaction(pos, cons.consumer_group_metadata())
                prod.commit_transaction()
                in_txn = False
            else:
                prod.flush()
                cons.commit(offsets=pos, asynchronous=False)
    prod.flush()
    cons.close()


def router_layout(kafka: KafkaConfig, admin, prefix: str) -> TopicLayout:
    """A deployment of its own per router run (topic names come only from a layout, epoch 0 from
    its control log's genesis); the routed topic stamps LogAppendTime, which the measurements read."""
    layout = TopicLayout(prefix=prefix, workers=8, input_partitions=4)
    specs = layout.specs()
    specs["routed"] = TopicSpec("routed", layout.name("routed"), 8, APPEND_TIME)
    create_deployment(kafka, layout, specs=specs, admin=admin, issuer="bench-router")
    return layout


def routed_run(
    kafka: KafkaConfig,
    layout: TopicLayout,
    n: int,
    eos: bool,
    src: str,
    folder: Path | None = None,
    feed: Callable[[], object] | None = None,
    router_kafka: KafkaConfig | None = None,
) -> float:
    """The router, records/s: ``ballast router run`` (router id ``bench``, a fresh group, batch and
    commit interval as the bare loop's) over ``src``, measured from outside (module docstring).

    ``folder``: where the supervisor keeps the service's folder and logs (a stack folder; none: a
    temporary one, removed afterwards). ``feed`` is called once the router consumes: it has
    announced epoch 0 in every routed partition for every input partition (``src`` must then be
    the layout's input topic). ``router_kafka``: the router's own connection, when it is not
    ``kafka``'s (its principal on a secured cluster; ``kafka`` then measures, as an admin)."""
    group = f"router-{uuid.uuid4().hex[:8]}"
    routed = layout.name("routed")
    start = end_offsets(kafka, routed)
    work = folder or Path(tempfile.mkdtemp(prefix="ballast-bench-router-"))
    try:
        services = {"router": router_kafka} if router_kafka is not None else None
        with Pipeline(kafka, layout, work, create=False, service_kafka=services) as pipe:
            command = pipe.router(
                "bench",
                group_id=group,
                exactly_once=eos,
                batch_size=BATCH,
                commit_interval_ms=COMMIT_MS,
                input_topics=(src,),
            )
            # timing starts at its first routed record, not here
            pipe.start(command, wait=feed is not None, timeout=FOREVER)
            if feed is not None:
                pipe.wait_epoch(0, FOREVER)
                feed()
            done = committed_time(kafka, group, src, n, lambda: pipe.check_running(command.name))
            code = pipe.stop(command.name)  # SIGTERM: it commits what is open and prints its totals
            if code != 0:
                raise RuntimeError(f"the router exited {code}:\n{pipe.log_tail(command.name)}")
            totals = json.loads(pipe.output(command.name).strip().splitlines()[-1])
            if totals["offered"] < n:
                raise RuntimeError(f"the router read {totals['offered']:,} records, expected {n:,}")
    finally:
        if folder is None:
            shutil.rmtree(work, ignore_errors=True)
    return n / (done - first_append_s(kafka, routed, start, lambda v: v.startswith(DATA_PREFIX)))


def latency(kafka: KafkaConfig, src: str, dst: str, parts: int, envelope: bool) -> dict[str, float]:
    """p50/p99 of (routed LogAppendTime − input CreateTime), 1 % sample matched by sequence number."""

    def read(topic: str, np_: int, key_of) -> dict[int, int]:
        c = Consumer(kafka.consumer(f"lat-{uuid.uuid4().hex[:8]}"))
        c.assign([TopicPartition(topic, p, 0) for p in range(np_)])
        out: dict[int, int] = {}
        idle = time.monotonic()
        while time.monotonic() - idle < 3:
            msgs = c.consume(10_000, 0.5)
            if msgs:
                idle = time.monotonic()
            for m in msgs:
                if m.error() is None:
                    seq = key_of(m.value())
                    if seq is not None and seq % 100 == 0:
                        out[seq] = m.timestamp()[1]
        c.close()
        return out

    codec = AvroCodec("io.ballast.RoutedEnvelope")

    def seq_routed(v: bytes):
        if not envelope:
            return _seq_of_input(v)
        branch, body = codec.decode(v)["body"]
        return int.from_bytes(body["payload"][:8], "big") if branch == "io.ballast.DataRecord" else None

    t_in = read(src, 4, _seq_of_input)
    t_out = read(dst, parts, seq_routed)
    lat = np.array([t_out[s] - t_in[s] for s in t_out if s in t_in], dtype=np.float64)
    return {
        "p50_ms": float(np.percentile(lat, 50)),
        "p99_ms": float(np.percentile(lat, 99)),
        "samples": len(lat),
    }


def _seq_of_input(v: bytes) -> int:
    # InputEvent body: key (1-byte len + key), double, payload (2-byte len), seq = first 8 payload bytes
    klen = v[10] >> 1
    i = 11 + klen + 8 + 2
    return int.from_bytes(v[i : i + 8], "big")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "router.json"))
    ap.add_argument("--repeats", type=int, default=2, help="throughput runs per loop and mode (best kept)")
    ap.add_argument("--paced-rate", type=float, default=20_000.0, help="input rate of the latency phase")
    ap.add_argument("--paced-seconds", type=float, default=10.0, help="length of the latency phase")
    args = ap.parse_args(argv)
    n = args.records
    state_dir = Path(tempfile.mkdtemp(prefix="ballast-bench-router-"))
    log(f"starting a broker in {state_dir}")
    stack = start_stack(state_dir, brokers=1)
    try:
        kafka = KafkaConfig.plaintext(stack.bootstrap, "bench-router")
        admin = make_admin(kafka)
        layout = TopicLayout(prefix="bench", workers=8, input_partitions=4)
        ensure_topics(
            admin,
            [
                TopicSpec("input", layout.name("input"), 4),
                TopicSpec("x", "bench.bare-alo", 8, APPEND_TIME),
                TopicSpec("x", "bench.bare-eos", 8, APPEND_TIME),
            ],
        )
        src = layout.name("input")
        log(f"preloading {n} records, {args.keys} Zipf(1.0) keys, 100-byte payloads")
        preload(kafka, src, n, args.keys)
        results: dict[str, dict] = {}
        paced_n = min(n, int(args.paced_rate * args.paced_seconds))
        for mode, eos in (("at_least_once", False), ("exactly_once", True)):
            tag = "eos" if eos else "alo"
            routed = router_layout(kafka, admin, f"bench-{tag}")
            # best of `repeats` alternating runs each: the machine is shared and noisy
            b = r = 0.0
            for attempt in range(1, args.repeats + 1):
                log(f"{mode}: bare loop ({attempt}/{args.repeats})")
                b = max(b, bare(kafka, src, f"bench.bare-{tag}", n, eos))
                log(f"{mode}: router ({attempt}/{args.repeats})")
                r = max(r, routed_run(kafka, routed, n, eos, src, state_dir))
            log(f"{mode}: bare {b:,.0f} rec/s, router {r:,.0f} rec/s (ratio {r / b:.2f})")
            # latency at a steady input rate, fresh topics so nothing is backlogged
            lat: dict[str, dict] = {}
            for loop in ("bare", "router"):
                if loop == "bare":
                    p_src, p_dst = f"bench.paced-{tag}-bare-in", f"bench.paced-{tag}-bare-out"
                    ensure_topics(admin, [TopicSpec("x", p_src, 4), TopicSpec("x", p_dst, 8, APPEND_TIME)])
                else:
                    paced = router_layout(kafka, admin, f"bench-paced-{tag}")
                    p_src, p_dst = paced.name("input"), paced.name("routed")
                log(f"{mode}: {loop} latency, {paced_n:,} records at {args.paced_rate:,.0f}/s")
                feeders: list[threading.Thread] = []

                def feed(src: str = p_src, started: list[threading.Thread] = feeders) -> None:
                    started.append(paced_producer(kafka, src, paced_n, args.keys, args.paced_rate))

                if loop == "bare":
                    bare(kafka, p_src, p_dst, paced_n, eos, feed)
                else:
                    routed_run(kafka, paced, paced_n, eos, p_src, state_dir, feed)
                feeders[0].join(120)
                lat[loop] = latency(kafka, p_src, p_dst, 8, envelope=loop == "router")
            log(f"{mode}: router p50 {lat['router']['p50_ms']:.0f} ms, p99 {lat['router']['p99_ms']:.0f} ms")
            results[mode] = {
                "bare_records_per_s": round(b),
                "router_records_per_s": round(r),
                "ratio_router_over_bare": round(r / b, 3),
                "router_latency_ms": lat["router"],
                "bare_latency_ms": lat["bare"],
            }
        report = {
            "records": n,
            "keys": args.keys,
            "zipf_z": 1.0,
            "payload_bytes": 100,
            "batch_size": BATCH,
            "commit_interval_ms": COMMIT_MS,
            "repeats": args.repeats,
            "throughput_note": (
                "records / (moment the loop's group has committed all of them - broker append time of "
                "the first record it wrote), both measured from outside; the router a `ballast router "
                "run` process, the bare loop a thread; best of `repeats` alternating runs per loop, "
                "same input, fresh group each"
            ),
            "input_partitions": 4,
            "routed_partitions": 8,
            "latency_note": (
                "routed LogAppendTime - input CreateTime, 1% sample, input produced at a steady "
                "paced_rate (below both loops' throughput) into fresh topics, from the moment the "
                "loop consumes; under exactly-once a reader (read_committed) also waits for the "
                "commit, up to commit_interval_ms more"
            ),
            "paced_rate_per_s": args.paced_rate,
            "paced_records": paced_n,
            "targets": {"at_least_once": 0.7, "exactly_once": 0.5},
            "results": results,
        }
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=2) + "\n")
        plot(results, out.with_suffix(".png"))
        print()
        print(
            f"{'mode':<16}{'bare rec/s':>14}{'router rec/s':>14}{'ratio':>8}{'target':>8}"
            f"{'p50 ms':>10}{'p99 ms':>10}"
        )
        for mode, r in results.items():
            print(
                f"{mode:<16}{r['bare_records_per_s']:>14,}{r['router_records_per_s']:>14,}"
                f"{r['ratio_router_over_bare']:>8.2f}{report['targets'][mode]:>8.2f}"
                f"{r['router_latency_ms']['p50_ms']:>10.0f}{r['router_latency_ms']['p99_ms']:>10.0f}"
            )
        log(f"wrote {out}")
    finally:
        stop_stack(state_dir, purge=True)
    return 0


def plot(results: dict[str, dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = list(results)
    x = np.arange(len(modes))
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.bar(x - 0.2, [results[m]["bare_records_per_s"] for m in modes], 0.4, label="bare loop")
    ax.bar(x + 0.2, [results[m]["router_records_per_s"] for m in modes], 0.4, label="router")
    ax.set_xticks(x, modes)
    ax.set_ylabel("records/s")
    ax.set_title("Router vs bare consume→produce")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    sys.exit(main())
