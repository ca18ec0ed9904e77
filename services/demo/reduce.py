"""The demo's Spark stateful reduce: the job in this process, and its check against ground truth.

Why in this process: the demo starts the very query ``ballast reduce run`` starts (``job_spec`` and
``build_query`` on a local SparkSession), so it can tell when the output is complete, stop the query
and compare what it wrote with the events the demo produced, without a second program to drive.

How a run ends: windows close when Spark's watermark (the highest event time seen, minus the delay)
passes their end. After the whole input is routed, the demo produces one *flush* event of its own key
a year after the last event; once the router has routed it, the next micro-batch raises the watermark
past every window of the input and each worker's event-time timer emits them. The flush key's own
window never closes, and the flush is not part of the ground truth.
"""

from __future__ import annotations

import json
import math
import shutil
import tempfile
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from confluent_kafka import KafkaError, Message, TopicPartition

from ballast.avro.codec import AvroCodec
from ballast.kafka.admin import make_admin, partition_count
from ballast.kafka.clients import make_consumer
from ballast.kafka.config import KafkaConfig
from ballast.kafka.reading import ConsumerError, read_topic
from ballast.kafka.topics import TopicLayout
from ballast.waiting import wait_until
from services.demo.report import ReduceSummary
from services.demo.settings import DemoSettings

if TYPE_CHECKING:
    from spark_jobs.reduce.config import ReduceSettings

FLUSH_KEY = "zz-flush"
FLUSH_AFTER_MS = 365 * 24 * 3600 * 1000  # a year after the last event: past any sane watermark delay
JOB_ID = "demo-reduce"
# Sums are doubles, and a key that moved has its sum merged from two partial sums (old owner's,
# new owner's), which can differ from the one-pass sum in the last bits; counts must be exact.
SUM_RTOL = 1e-6

Window = tuple[str, int, int]  # key, window start, window end
Write = tuple[int, int, float]  # worker, count, sum of one output record


def flush_event(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The far-future event; its payload carries the next sequence number, like every demo event."""
    return {
        "key": FLUSH_KEY,
        "value": 0.0,
        "payload": len(events).to_bytes(8, "big"),
        "event_time": max(e["event_time"] for e in events) + FLUSH_AFTER_MS,
    }


def auto_watermark_delay(events: list[dict[str, Any]]) -> str:
    """Half the input's event-time span, in whole seconds (a Spark interval).

    Why half: the demo produces each half before (or while) the router routes it, so a routed
    partition can run ahead of another by at most one half's event times; with this delay no
    record is ever behind the watermark, whatever order the router reads the input partitions in.
    """
    times = [e["event_time"] for e in events]
    return f"{max(1, math.ceil((max(times) - min(times)) / 2000))} seconds"


def key_totals(events: Iterable[Mapping[str, Any]]) -> dict[str, tuple[int, float]]:
    """Ground truth: per key, its records and the exact sum of its values."""
    values: dict[str, list[float]] = defaultdict(list)
    for e in events:
        values[e["key"]].append(e["value"])
    return {k: (len(v), math.fsum(v)) for k, v in values.items()}


class OutputWindows:
    """The output topic, read as it fills: every record the job wrote, by key and window."""

    def __init__(self, cfg: KafkaConfig, topic: str, job: str) -> None:
        self.topic = topic
        self.job = job
        self.partitions = partition_count(make_admin(cfg), topic)
        self.codec = AvroCodec("io.ballast.OutputResult")
        self.writes: dict[Window, list[Write]] = defaultdict(list)
        self.keys: set[str] = set()
        self._next = dict.fromkeys(range(self.partitions), 0)
        self.consumer = make_consumer(cfg, f"ballast-demo-output-{uuid.uuid4().hex[:8]}")
        self.consumer.assign([TopicPartition(topic, p, 0) for p in range(self.partitions)])

    def poll(self, timeout: float = 0.5) -> int:
        msgs = self.consumer.consume(10_000, timeout=timeout)
        for m in msgs:
            self._take(m)
        return len(msgs)

    def _take(self, m: Message) -> None:
        err = m.error()
        if err is not None:
            if err.code() == KafkaError._PARTITION_EOF:
                return
            raise ConsumerError(f"consumer error: {err}")
        self._next[m.partition()] = m.offset() + 1
        r = self.codec.decode(m.value(), m.topic(), m.partition(), m.offset())
        if r["job"] == self.job:
            self.writes[(r["key"], r["window_start"], r["window_end"])].append(
                (r["worker"], r["count"], r["sum"])
            )
            self.keys.add(r["key"])

    def drain(self, timeout: float = 60.0) -> None:
        """Read up to the end offsets as of now (the job writes without transactions: no markers)."""
        ends = {
            p: self.consumer.get_watermark_offsets(TopicPartition(self.topic, p), timeout=10, cached=False)[1]
            for p in range(self.partitions)
        }

        def done() -> bool:
            self.poll(0.2)
            return all(self._next[p] >= end for p, end in ends.items())

        wait_until(done, timeout, f"reading {self.topic} to its end", interval=0)

    def close(self) -> None:
        self.consumer.close()


class DemoReduce:
    """The reduce query on a local SparkSession in this process, from its start to its check."""

    def __init__(
        self, cfg: KafkaConfig, layout: TopicLayout, demo: DemoSettings, events: list[dict[str, Any]]
    ) -> None:
        self.cfg = cfg
        self.layout = layout
        self.demo = demo
        self.events = events
        self.summary = ReduceSummary(
            job=JOB_ID,
            processor=demo.processor,
            watermark_delay=demo.watermark_delay or auto_watermark_delay(events),
            trigger=demo.trigger,
            local_cores=demo.local_cores,
            flush_key=FLUSH_KEY,
        )
        self.spark: Any = None
        self.query: Any = None
        self.output: OutputWindows | None = None
        # the checkpoint and the Spark JVM's own output; removed at the end unless the check failed
        self.folder = Path(tempfile.mkdtemp(prefix="ballast-demo-reduce-"))
        self.checkpoint = self.folder / "checkpoint"
        self.log = self.folder / "spark.log"

    def start(self) -> None:
        """Spark up, the query started (it reads the routed topic from its beginning)."""
        from spark_jobs.reduce.config import ReduceSettings

        started = time.monotonic()
        s = self.summary
        settings = ReduceSettings(
            job_id=s.job,
            processor=s.processor,
            checkpoint=self.checkpoint,
            watermark_delay=s.watermark_delay,
            trigger=s.trigger,
            local_cores=s.local_cores,
        )
        try:
            self._start_query(settings)
        except Exception as exc:
            self.summary.spark_log = str(self.log)
            raise RuntimeError(f"the Spark reduce did not start: {exc} (Spark's output: {self.log})") from exc
        self.output = OutputWindows(self.cfg, self.layout.name("output"), s.job)
        s.start_s = time.monotonic() - started

    def _start_query(self, settings: ReduceSettings) -> None:
        from spark_jobs.reduce.job import SPARK_CONF, build_query
        from spark_jobs.reduce.runner import job_spec
        from spark_jobs.session import local_spark

        s = self.summary
        self.spark = local_spark(
            "ballast-demo-reduce",
            cores=s.local_cores,
            shuffle_partitions=self.layout.workers,  # one Spark state partition per routed partition
            conf={**SPARK_CONF, "spark.ui.showConsoleProgress": "false"},
            output=self.log,  # Spark's log lines and its Python workers' prints, off the console
        )
        spec = job_spec(self.spark, self.cfg, self.layout, settings)
        self.query = build_query(
            self.spark, spec, str(self.checkpoint), watermark_delay=s.watermark_delay, trigger=s.trigger
        )

    def wait_caught_up(self, what: str, timeout: float) -> None:
        """Until the query has read the routed topic up to its end offsets as of now.

        Why the demo waits: so the reduce has built every key's state under epoch 0 before the plan
        moves keys, and the move happens between micro-batches of a running stream, not inside
        one batch that reads both epochs at once.
        """
        assert self.output is not None, "start() first"
        routed = self.layout.name("routed")
        consumer = self.output.consumer
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(routed, p), timeout=10, cached=False)[1]
            for p in range(self.layout.workers)
        }
        read: dict[str, int] = {}

        def caught_up() -> bool:
            self._raise_if_failed()
            progress = self.query.lastProgress
            if progress:
                end = progress["sources"][0]["endOffset"]
                read.update((json.loads(end) if isinstance(end, str) else end).get(routed, {}))
            return all(int(read.get(str(p), -1)) >= e for p, e in ends.items())

        wait_until(
            caught_up,
            timeout,
            what,
            interval=0.5,
            describe=lambda: f"read to offsets {read or '-'}, routed topic ends at {ends}",
        )

    def _raise_if_failed(self) -> None:
        if not self.query.isActive:
            failure = self.query.exception()
            raise RuntimeError(f"the reduce query stopped: {failure or 'no error given'}")

    def finish(
        self,
        moves: Mapping[str, tuple[int, int]],
        plan_epoch: int,
        counter: Callable[[str, int], Any],
        flush_routed_at: float,
    ) -> ReduceSummary:
        """Wait for every key's windows and a quiet query, stop it, check the output against the input.

        ``moves``: the plan's pinned keys, each with (hash home, pinned worker); ``counter``: a
        progress counter factory (label, total).
        """
        s = self.summary
        output = self.output
        assert output is not None, "start() first"
        expected = key_totals(self.events)
        keys = set(expected)
        try:
            with counter("reduce: keys with windows", len(keys)) as advance:

                def every_key() -> bool:
                    self._raise_if_failed()
                    output.poll(0.5)
                    advance(len(keys & output.keys))
                    return keys <= output.keys

                wait_until(
                    every_key,
                    self.demo.reduce_timeout_s,
                    "the reduce writing a window for every key",
                    interval=0,
                    describe=lambda: f"{len(keys & output.keys):,} of {len(keys):,} keys",
                )
            self._settle(self.demo.reduce_timeout_s)
            output.drain()
        except Exception as exc:  # reported, and the demo still stops everything and says what it saw
            s.error = f"{type(exc).__name__}: {exc}"
        s.drain_s = time.monotonic() - flush_routed_at
        _batch_figures(s, self.query.recentProgress)
        self.stop()
        stats = [
            body
            for source, body in _worker_stats(self.cfg, self.layout.name("metrics"))
            if source.startswith(f"{s.job}/worker-")
        ]
        dead = _dead_letters(self.cfg, self.layout.name("dead_letter"), self.layout.name("routed"))
        check_reduce(s, expected, output.writes, stats, dead, moves, plan_epoch)
        if not s.ok:
            s.spark_log = str(self.log)  # kept for a look at what Spark said
        return s

    def _settle(self, timeout: float) -> None:
        """Until a trigger finds nothing to do: chunks in flight and watermark batches all processed."""
        timed_out = threading.Event()

        def give_up() -> None:
            timed_out.set()
            self.query.stop()

        watchdog = threading.Timer(timeout, give_up)
        watchdog.start()
        try:
            self.query.processAllAvailable()
        finally:
            watchdog.cancel()
        if timed_out.is_set():
            raise TimeoutError(f"the reduce query did not go quiet within {timeout:g} s")
        self._raise_if_failed()

    def stop(self) -> None:
        """The query stopped, then Spark (its executors and Python workers); safe to call twice."""
        if self.query is not None:
            try:
                self.query.stop()
            finally:
                self.query = None
        if self.spark is not None:
            try:
                self.spark.stop()
            finally:
                self.spark = None

    def close(self) -> None:
        """Everything stopped and closed; the folder removed unless a failure kept Spark's output."""
        self.stop()
        if self.output is not None:
            self.output.close()
            self.output = None
        if self.summary.spark_log is None:
            shutil.rmtree(self.folder, ignore_errors=True)


def _batch_figures(s: ReduceSummary, recent: list[dict[str, Any]]) -> None:
    """Micro-batches run, and the duration of the recent ones (Spark keeps the last 100).

    Progress without ``addBatch`` is an idle trigger's (no batch ran); batch ids are dense from 0.
    """
    ran = [p for p in recent if "addBatch" in p["durationMs"]]
    s.micro_batches = max(int(p["batchId"]) for p in ran) + 1 if ran else 0
    s.batches = [
        [int(p["batchId"]), int(p["numInputRows"]), int(p["durationMs"]["triggerExecution"])] for p in ran
    ]
    durations = sorted(ms for _, _, ms in s.batches)
    if durations:
        s.batch_ms_median = durations[len(durations) // 2]
        s.batch_ms_max = durations[-1]


def _worker_stats(cfg: KafkaConfig, topic: str) -> list[tuple[str, dict[str, Any]]]:
    codec = AvroCodec("io.ballast.MetricsRecord")
    found = []
    for m in read_topic(cfg, topic, idle=1.5, timeout=60):
        record = codec.decode(m.value(), m.topic(), m.partition(), m.offset())
        branch, body = record["body"]
        if branch == "io.ballast.WorkerStats":
            found.append((record["source"], body))
    return found


def _dead_letters(cfg: KafkaConfig, topic: str, routed: str) -> Counter[str]:
    """The job's dead letters by reason (the router's name the input topic as their source)."""
    reasons: Counter[str] = Counter()
    for m in read_topic(cfg, topic, idle=1.5, timeout=60):
        headers = {k: v for k, v in (m.headers() or [])}
        if headers.get("ballast.source.topic", b"").decode() == routed:
            reasons[headers.get("ballast.error.reason", b"?").decode()] += 1
    return reasons


def check_reduce(
    s: ReduceSummary,
    expected: Mapping[str, tuple[int, float]],
    writes: Mapping[Window, list[Write]],
    stats: list[dict[str, Any]],
    dead: Mapping[str, int],
    moves: Mapping[str, tuple[int, int]],
    plan_epoch: int,
) -> None:
    """Fill ``s`` from the job's output, worker stats and dead letters; pure, so a unit test drives it.

    ``writes``: every output record by (key, window start, window end) as (worker, count, sum);
    ``moves``: each pinned key's (hash home, pinned worker).
    """
    s.windows = len(writes)
    s.rewritten_windows = sum(len(w) - 1 for w in writes.values())
    s.split_windows = sum(1 for w in writes.values() if len({worker for worker, _, _ in w}) > 1)
    counts: Counter[str] = Counter()
    sums: dict[str, list[float]] = defaultdict(list)
    for (key, _, _), w in writes.items():
        _, count, total = w[-1]  # a rewrite carries the window's final value again
        counts[key] += count
        sums[key].append(total)
    s.keys_expected = len(expected)
    s.keys_checked = sum(1 for k in expected if k in counts)
    s.unexpected_keys = sum(1 for k in counts if k not in expected and k != s.flush_key)
    s.count_mismatches = s.sum_mismatches = 0
    s.max_sum_error = 0.0
    for key, (n, total) in expected.items():
        if key not in counts:
            continue
        s.count_mismatches += counts[key] != n
        error = abs(math.fsum(sums[key]) - total) / max(abs(total), 1e-12)
        s.max_sum_error = max(s.max_sum_error, error)
        s.sum_mismatches += error > SUM_RTOL

    s.worker_steps = len(stats)
    s.late_records = sum(int(st["late_records"]) for st in stats)
    s.misplaced_steps = sum(1 for st in stats if st["spark_partition"] != st["worker"])
    s.duplicate_chunks = sum(int(st["duplicate_chunks"]) for st in stats)
    s.held_records = sum(int(st["held_records"]) for st in stats)
    last: dict[int, dict[str, Any]] = {}
    for st in stats:
        if st["worker"] not in last or st["step"] >= last[st["worker"]]["step"]:
            last[st["worker"]] = st
    s.pending_keys = sum(int(st["pending_keys"]) for st in last.values())
    installed = {(c["key"], c["epoch"], st["worker"]): c for st in stats for c in st["chunks_installed"]}
    s.chunks_sent = sum(len(st["chunks_sent"]) for st in stats)
    s.chunks_installed = len(installed)
    s.chunk_bytes = sum(int(c["bytes"]) for c in installed.values())
    moved = {key for key, _, _ in installed}
    s.keys_moved = sorted(moved, key=lambda k: (-expected.get(k, (0, 0.0))[0], k))
    must_move = {k: (home, pinned) for k, (home, pinned) in moves.items() if home != pinned}
    s.moves_expected = len(must_move)
    s.moves_missing = sorted(
        k
        for k, (home, pinned) in must_move.items()
        if (c := installed.get((k, plan_epoch, pinned))) is None or c["worker"] != home
    )
    s.dead_letters = dict(dead)
