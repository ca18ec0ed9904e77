"""``make bench-reduce``: one stateful processor under three placements, on the same skewed input.

Placements (same processor, same per-record cost, same input, one Spark session ``local[8]``):

* **(a) Spark's own placement**: the routed data records grouped by key
  (``groupBy(key).transformWithStateInPandas``, one group = one key, a value state and an
  event-time timer per key) running the same processor (``spark_jobs.processors.from_spec``);
  Spark's shuffle puts a key in partition ``pmod(murmur3(key), 8)``.
* **(b) Ballast, hash only**: the reduce job (``spark_jobs.reduce``) over a routed topic whose
  router never gets a routing update (8 workers, ``F(k) = murmur2(k) mod 8``).
* **(c) Ballast with routing updates**: the same job; at each phase start a planning round
  (router heavy hitters from the metrics topic, ``plan_from_load`` / ``plan_table``, Mixed planner)
  sends the changed keys as one ``ROUTING_UPDATE``; keys move live, state chunks and all.

Input: phases of Zipf(z = 1.0) keys over ``--keys`` keys; each phase draws a new rank -> key
permutation, so the hot set shifts at every phase start. Values are multiples of 1/4, event times
advance 1 ms every 10 events (as the reduce tests generate them). Every placement has its own
deployment (topic prefix) on one broker started here, its own router and its own query. The job
reads a routed topic the benchmark fills slice by slice while the query runs: migrations happen
inside the run, chunk by chunk, exactly as in production.

Decisions:

* **Lockstep micro-batches, pipelined.** The input is released in *slices*: a slice is produced to
  the placement's input topic, routed by a real router driven in this process (``Router.step``,
  exactly-once), and committed as *one* transaction, so Spark's ``read_committed`` source sees it
  whole. The next slice is released as soon as the checkpoint's offset log shows that the batch
  covering the previous slice was planned. So every micro-batch holds one slice (plus the state
  chunks the previous batch wrote) in every placement, the query is never idle within a phase (a
  stream at capacity with one slice of backlog), and batch durations compare the same work.
  ``maxOffsetsPerTrigger`` is not used: Spark's rate limit takes from each partition in proportion
  to its backlog, which mixes event time across partitions. A query that is *idle* when a slice
  is committed (the first slice of a phase) can list the partitions' offsets while the commit
  markers are on some of them only, and read the slice in two batches (about once per run with a
  500 ms trigger). So the router commits in the middle of Spark's trigger cycle: an idle query
  lists offsets at whole multiples of the trigger interval. Should it still happen, the first
  batch is reported as ``partial`` and the rest is left out of the full-slice figures.
* **Phases, interleaved.** Each phase starts with a *prefix* slice (half a slice), routed under
  the old table in every placement: the load a controller has to see before it can react. In (c)
  the planning round runs on the prefix's heavy hitters while the prefix batch runs, and the
  phase's full slices are routed under the new table. Placements take turns phase by phase (a, b,
  c, a, ...): the machine is shared and noisy, and taking turns spreads the noise over all three.
* **Per-record cost** (``--record-cost-us``): one sleep per key of ``records x cost`` at the
  stateful step (the job's ``--record-cost-us``; the same sleep in (a)'s per-key call), so the 8
  tasks of a batch sleep side by side on 2 cores. Cost and slice size make the mean worker's sleep
  per batch (14 s) large against the rest of a batch (2.5-5 s measured here, depending on the
  machine's load: ``batch_minus_busiest_p50_ms``), which no placement changes; otherwise placement
  cannot show in batch durations. The most (c) can gain over (b) is the ratio of their busiest
  workers (``busiest_worker_*``).
* **Planner input.** Routers publish one ``RouterKeyStats`` record per commit here (stats interval
  0, in the slice's transaction), with ``--heavy-hitters`` keys: the planner can only move keys it
  sees, and with the router's default top 100 the untracked tail left the hot key's worker over
  the cap (in a simulation of this workload: max/mean 1.5 vs 1.16 with the top 2000).
* **No-data micro-batches are off** (``spark.sql.streaming.noDataMicroBatches.enabled=false``):
  with them every slice is followed by a batch that only fires timers, doubling the fixed cost;
  here closed windows are emitted at the start of the next data batch instead.
* **Figures.** Micro-batch duration is Spark's ``triggerExecution``; p50/p99 are over the
  full-slice batches (the same slices in every placement; with 12 batches p99 is close to the
  maximum); every batch is in the JSON. The first batch of each query (the markers of the router's
  first assignment, and Spark's start-up) is ``warmup`` and not counted. Records/s = data records
  / sum of the placement's batch durations (prefix, partial and chunk-only batches included).
  Per-worker load = data records a worker processed in a batch (``WorkerStats.records``; for (a)
  the records per Spark partition, from a row the key processor writes with
  ``TaskContext.partitionId()``), max/mean per full-slice batch.
* **Keys not moved during a migration (acceptance 3)**, in (c), within each phase (the machine's
  load drifts between phases): a batch has a *migration under way* when a worker shipped or
  installed a chunk or held records for a key waiting for its chunk. Batch duration: those batches
  vs the phase's other full-slice batches. ``flow_latency_p99_ms`` (append -> start of the
  worker's step, records of keys not waiting for a chunk, max over the workers of a batch): a
  record waits in the backlog while the previous batch runs, so a batch counts as affected when it
  or its predecessor had a migration under way, against the phase's other full-slice batches.
* **Uniform throughput** (a vs b): a separate run with uniform keys (z = 0) and no record cost,
  placements taking turns per round; records/s as above. It prices Spark's per-key Python call and
  state round trips against Ballast's per-worker grouping.

Writes bench/results/reduce.json and reduce.png (``--out``), prints a summary table. ``--quick``
is a smoke run of about 7 minutes (written to reduce-quick.json); the defaults are the full run,
about 24 minutes on the shared 2-core machine. Every parameter is a flag (``-h``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import struct
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle

from ballast.avro.codec import AvroCodec
from ballast.avro.wire import INPUT_HEADER, encode_input_body
from ballast.control.log import ControlLogWriter
from ballast.control.state import initial_state, routing_update
from ballast.deployment.create import create_deployment
from ballast.devstack.stack import start_stack, stop_stack
from ballast.kafka.admin import make_admin
from ballast.kafka.configuration import KafkaConfig
from ballast.kafka.topics import TopicLayout
from ballast.routing.table import RoutingTable
from ballast.workload import key_name, zipf_key_ids
from services.controller.planning import plan_from_load, plan_table
from services.controller.router_load import ROUTER_KEY_STATS, RouterLoad
from services.router.config import RouterSettings
from services.router.router import Router
from spark_jobs.processors.interface import KeyRecords
from spark_jobs.processors.spec import from_spec

if __name__ != "__main__":  # imported (a test): Spark must still ship KeyedProcessor by value
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])

ROOT = Path(__file__).resolve().parents[2]
WORKERS = 8
INPUT_PARTITIONS = 4
START_MS = 1_767_225_600_000
PER_MS = 10  # events per ms of event time
WAIT_S = 1800.0  # no single wait of the benchmark may take longer (a stuck run ends here)
STATUS_S = 15.0
WORKER_STATS = "io.ballast.WorkerStats"


def log(msg: str) -> None:
    print(f"[bench-reduce {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# --- settings ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Params:
    keys: int = 10_000
    z: float = 1.0
    phases: int = 3
    slices: int = 4  # full slices per phase
    slice_records: int = 16_000
    prefix_records: int = 8_000
    record_cost_us: float = 7_000.0
    theta: float = 0.05
    heavy_hitters: int = 2_000
    processor: str = "aggregate:size=10s"
    watermark_delay: str = "10 seconds"
    trigger_ms: int = 2_000
    uniform_rounds: int = 2
    uniform_slices: int = 2
    uniform_slice_records: int = 8_000
    seed: int = 11
    placements: str = "abc"


QUICK = {
    "phases": 2,
    "slices": 4,
    "slice_records": 6_000,
    "prefix_records": 3_000,
    "record_cost_us": 1_500.0,
    "uniform_rounds": 1,
    "uniform_slices": 2,
    "uniform_slice_records": 5_000,
}


# --- input --------------------------------------------------------------------------------------------


@dataclass
class Slice:
    """A run of consecutive input events: released and routed as one transaction."""

    phase: int
    index: int  # 0: the phase's prefix
    first: int  # global index of its first event (event time = START_MS + index // PER_MS)
    records: list[tuple[bytes, bytes]]

    @property
    def kind(self) -> str:
        return "prefix" if self.index == 0 else "slice"


class Workload:
    """The events of one phase: Zipf(z) ranks through the phase's own rank -> key permutation."""

    def __init__(self, keys: int, z: float, seed: int) -> None:
        self.keys, self.z, self.seed = keys, z, seed
        self.names = [key_name(i).encode() for i in range(keys)]
        self.next_index = 0

    def phase(self, phase: int, sizes: list[int]) -> list[Slice]:
        n = sum(sizes)
        seed = self.seed + 101 * phase
        perm = np.random.default_rng(seed + 1).permutation(self.keys)
        ids = (
            perm[zipf_key_ids(n, self.keys, self.z, seed)]
            if self.z > 0
            else (np.random.default_rng(seed).integers(0, self.keys, size=n))
        )
        values = np.random.default_rng(seed + 2).integers(0, 400, size=n) / 4.0
        first = self.next_index
        self.next_index += n
        out: list[Slice] = []
        at = 0
        for i, size in enumerate(sizes):
            records = []
            for j in range(at, at + size):
                g = first + j
                k = self.names[ids[j]]
                body = encode_input_body(k, float(values[j]), g.to_bytes(8, "big"), START_MS + g // PER_MS)
                records.append((k, INPUT_HEADER + body))
            out.append(Slice(phase, i, first + at, records))
            at += size
        return out


# --- Kafka helpers --------------------------------------------------------------------------------------


class TopicTail:
    """Reads a topic from the beginning, a bit more at each call (read_committed, no group)."""

    def __init__(self, kafka: KafkaConfig, topic: str, partitions: int) -> None:
        self.topic = topic
        self.parts = partitions
        self.consumer = Consumer(
            kafka.consumer(
                f"bench-tail-{topic}", **{"isolation.level": "read_committed", "enable.auto.commit": False}
            )
        )
        self.consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])

    def high(self) -> list[int]:
        return [
            self.consumer.get_watermark_offsets(TopicPartition(self.topic, p), timeout=10, cached=False)[1]
            for p in range(self.parts)
        ]

    def read_new(self, timeout: float = 60.0) -> list[Any]:
        """Every record up to the end as it is now (waits for open transactions to settle)."""
        ends = self.high()
        out = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for m in self.consumer.consume(10_000, 0.2):
                if m.error() is None:
                    out.append(m)
                elif m.error().code() != KafkaError._PARTITION_EOF:
                    raise RuntimeError(f"reading {self.topic}: {m.error()}")
            pos = self.consumer.position([TopicPartition(self.topic, p) for p in range(self.parts)])
            if all(tp.offset >= end or end == 0 for tp, end in zip(pos, ends, strict=True)):
                return out
        raise TimeoutError(f"reading {self.topic} to {ends}: stuck at {pos}")

    def close(self) -> None:
        self.consumer.close()


class RouterDriver:
    """A real router stepped by the benchmark: one slice = consume all of it, then one commit."""

    def __init__(self, kafka: KafkaConfig, layout: TopicLayout, heavy_hitters: int, keys: int) -> None:
        settings = RouterSettings(
            router_id=f"{layout.prefix}-router",
            group_id=f"{layout.prefix}-routers",
            exactly_once=True,
            commit_interval_ms=3_600_000,  # never on its own: the benchmark commits once per slice
            stats_interval_s=0.0,  # a RouterKeyStats record in every commit (one per slice)
            heavy_hitters_top=heavy_hitters,
            heavy_hitter_capacity=max(10_000, 2 * keys),
            max_poll_interval_ms=3_600_000,  # idle while the other placements run
            log_level="warning",
        )
        self.layout = layout
        self.router = Router.connect(settings, layout, kafka)
        self.router.start()
        self.producer = Producer(kafka.producer(**{"linger.ms": 5}))
        self.input = layout.name("input")
        self.routed = TopicTail(kafka, layout.name("routed"), WORKERS)
        deadline = time.monotonic() + 120
        while not self.router.checkpoint.assigned:
            if time.monotonic() > deadline:
                raise TimeoutError(f"router of {layout.prefix}: no input partitions assigned")
            self.router.step()
        self.router.checkpoint.commit()  # the markers owed at assignment

    @property
    def epoch(self) -> int:
        return self.router.state.epoch

    def route(self, records: list[tuple[bytes, bytes]], trigger_ms: int) -> list[int]:
        """Produce ``records`` to the input, route them all, commit; the routed topic's ends.

        The commit waits for the middle of Spark's trigger cycle: an idle query lists offsets at
        whole multiples of the trigger interval (wall clock), and one that lists them while the
        commit markers are on some partitions only reads the slice in two batches.
        """
        for k, v in records:
            while True:
                try:
                    self.producer.produce(self.input, v, k)
                    break
                except BufferError:
                    self.producer.poll(0.05)
        self.producer.flush(120)
        target = self.router.totals.offered + len(records)
        deadline = time.monotonic() + 300
        while self.router.totals.offered < target:
            if time.monotonic() > deadline:
                raise TimeoutError(f"router of {self.layout.prefix}: {self.router.totals.offered}/{target}")
            self.router.step()
        cycle = trigger_ms / 1000
        phase = time.time() % cycle
        if not 0.4 * cycle <= phase < 0.6 * cycle:
            time.sleep((0.4 * cycle - phase) % cycle)
        self.router.checkpoint.commit()
        return self.routed.high()

    def await_epoch(self, epoch: int) -> None:
        deadline = time.monotonic() + 120
        while self.router.state.epoch < epoch:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"router of {self.layout.prefix}: epoch {self.router.state.epoch} < {epoch}"
                )
            self.router.step()

    def close(self) -> None:
        self.router.stop()
        self.router.run()  # commits what is open, closes the clients
        self.routed.close()


# --- (a): Spark's own placement -----------------------------------------------------------------------------

KEYED_OUTPUT = "topic STRING, key BINARY, value BINARY"
LOAD_ROW = "<iii"  # spark partition, records, late records


class KeyedProcessor(StatefulProcessor):
    """One key per group: the same processor and the same per-record sleep as the reduce job's
    worker, with the key's state in a value state and one event-time timer per key."""

    def __init__(self, processor: str, record_cost_s: float, topics: dict[str, str], job: str) -> None:
        self.spec = processor
        self.cost = record_cost_s
        self.topics = topics
        self.job = job

    def init(self, handle: StatefulProcessorHandle) -> None:
        from spark_jobs.reduce.outputs import OutputEncoder

        self.handle = handle
        self.state = handle.getValueState("state", "blob BINARY, timer LONG")
        self.processor = from_spec(self.spec)
        self.encoder = OutputEncoder(self.topics, -1, self.job)

    def handleInputRows(self, key, rows, timerValues) -> Iterator[pd.DataFrame]:
        frame = pd.concat(list(rows), ignore_index=True).sort_values("offset", kind="stable")
        watermark = max(int(timerValues.getCurrentWatermarkInMs()), 0)
        times = frame["event_time"].to_numpy(dtype=np.int64)
        values = frame["value"].to_numpy(dtype=np.float64)
        fresh = times >= watermark
        records = KeyRecords(times[fresh], values[fresh])
        if self.cost:
            time.sleep(len(records) * self.cost)
        state, timer = self._load()
        if len(records):
            state = self.processor.process(key[0], records, state)
        yield self._finish(key[0], state, timer, watermark, len(records), int((~fresh).sum()))

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo) -> Iterator[pd.DataFrame]:
        state, _timer = self._load()  # the timer fired: Spark removed it
        watermark = max(int(timerValues.getCurrentWatermarkInMs()), 0)
        yield self._finish(key[0], state, None, watermark, 0, 0)

    def _load(self) -> tuple[Any, int | None]:
        stored = self.state.get()
        if stored is None:
            return self.processor.init(), None
        timer = int(stored[1]) if stored[1] is not None and stored[1] >= 0 else None
        return self.processor.decode(bytes(stored[0])), timer

    def _finish(
        self, key: str, state: Any, timer: int | None, watermark: int, n: int, late: int
    ) -> pd.DataFrame:
        from pyspark import TaskContext

        rows: list[tuple[str, bytes | None, bytes]] = []
        due = self.processor.next_due(state)
        if due is not None and due <= watermark:
            results, state = self.processor.emit(key, state, watermark)
            for r in results:
                rows.append(
                    (
                        self.topics["output"],
                        f"{self.job}:{r.window_start}:{key}".encode(),
                        self.encoder.result_value(r, 0),
                    )
                )
            due = self.processor.next_due(state)
        if timer is not None and timer != due:
            self.handle.deleteTimer(timer)
            timer = None
        if due is not None and timer is None:
            self.handle.registerTimer(int(due))
        if self.processor.is_empty(state):
            self.state.clear()
        else:
            self.state.update((bytearray(self.processor.encode(state)), -1 if due is None else int(due)))
        context = TaskContext.get()
        partition = context.partitionId() if context is not None else -1
        rows.append((self.topics["metrics"], b"bench-load", struct.pack(LOAD_ROW, partition, n, late)))
        return pd.DataFrame(rows, columns=["topic", "key", "value"])

    def close(self) -> None:
        pass


# --- placements -------------------------------------------------------------------------------------------


@dataclass
class Batch:
    id: int
    start_ms: int
    duration_ms: int
    input_rows: int
    durations: dict[str, int]
    slice: tuple[int, int] | None = None  # (phase, index) of the slice it was planned for
    kind: str = "extra"  # warmup | prefix | slice | partial | extra (see Placement.batches)
    phase: int = -1
    split: bool = False  # the rest of a slice a ``partial`` batch began: not a whole slice
    worker_records: list[int] = field(default_factory=list)
    worker_busy_ms: list[float] = field(default_factory=list)
    latency_p99_ms: float = 0.0
    latency_p50_ms: float = 0.0
    chunks_sent: int = 0
    chunks_installed: int = 0
    held: int = 0
    pending: int = 0
    late: int = 0

    @property
    def migrating(self) -> bool:
        """A migration is under way in this batch: chunks shipped or installed, records held."""
        return bool(self.chunks_sent or self.chunks_installed or self.held or self.pending)


class Placement:
    def __init__(
        self,
        name: str,
        label: str,
        spark_grouping: bool,
        updates: bool,
        record_cost_us: float,
        params: Params,
        kafka: KafkaConfig,
        admin: Any,
        spark: Any,
        workdir: Path,
    ) -> None:
        from spark_jobs.reduce.config import ReduceSettings
        from spark_jobs.reduce.runner import job_spec

        self.name, self.label = name, label
        self.spark_grouping, self.updates = spark_grouping, updates
        self.params = params
        self.kafka = kafka
        self.layout = TopicLayout(prefix=f"bench-{name}", workers=WORKERS, input_partitions=INPUT_PARTITIONS)
        create_deployment(kafka, self.layout, admin=admin, issuer="bench-reduce")
        self.router = RouterDriver(kafka, self.layout, params.heavy_hitters, params.keys)
        self.metrics = TopicTail(kafka, self.layout.name("metrics"), 1)
        self.writer = (
            ControlLogWriter(
                kafka, self.layout.name("control"), initial_state(WORKERS), issuer="bench-reduce"
            )
            if updates
            else None
        )
        self.table: dict[bytes, int] = {}
        self.checkpoint = workdir / f"checkpoint-{name}"
        self.job = f"bench-{name}"
        settings = ReduceSettings(
            job_id=self.job,
            processor=params.processor,
            checkpoint=self.checkpoint,
            watermark_delay=params.watermark_delay,
            trigger=f"{params.trigger_ms} milliseconds",
            record_cost_us=record_cost_us,
        )
        self.spec = job_spec(spark, kafka, self.layout, settings)
        self.query = self._start(spark, record_cost_us)
        self.progress: dict[int, dict] = {}
        self.last_planned = -1
        self.slice_batches: dict[tuple[int, int], int] = {}
        self.slice_records: dict[tuple[int, int], int] = {}
        self.updates_sent: list[dict] = []
        self.router_stats: list[dict] = []

    def _start(self, spark: Any, record_cost_us: float) -> Any:
        from pyspark.sql import functions as F

        from spark_jobs.reduce.engine import DATA
        from spark_jobs.reduce.job import build_query, routed_rows

        p = self.params
        if not self.spark_grouping:
            return build_query(
                spark,
                self.spec,
                str(self.checkpoint),
                watermark_delay=p.watermark_delay,
                trigger=f"{p.trigger_ms} milliseconds",
            )
        rows = routed_rows(spark, self.spec, p.watermark_delay)
        data = rows.filter(F.col("kind") == DATA).select("key", "offset", "event_time", "value")
        out = data.groupBy("key").transformWithStateInPandas(
            statefulProcessor=KeyedProcessor(p.processor, record_cost_us / 1e6, self.spec.topics, self.job),
            outputStructType=KEYED_OUTPUT,
            outputMode="Update",
            timeMode="EventTime",
        )
        return (
            out.writeStream.format("kafka")
            .queryName(self.job)
            .option("kafka.bootstrap.servers", self.kafka.bootstrap_servers)
            .option("checkpointLocation", str(self.checkpoint))
            .outputMode("update")
            .trigger(processingTime=f"{p.trigger_ms} milliseconds")
            .start()
        )

    # --- driving ------------------------------------------------------------------------------------

    def release(self, s: Slice) -> list[int]:
        self.slice_records[(s.phase, s.index)] = len(s.records)
        return self.router.route(s.records, self.params.trigger_ms)

    def planned_batch(self, ends: list[int], what: str) -> int:
        """Wait until a planned batch's end offsets cover ``ends``; its id."""
        topic = self.spec.topics["routed"]
        offsets_dir = self.checkpoint / "offsets"
        seen = self.last_planned
        started = last = time.monotonic()
        while True:
            self._check_query()
            ids = (
                sorted(int(f.name) for f in offsets_dir.iterdir() if f.name.isdigit())
                if offsets_dir.exists()
                else []
            )
            for b in (i for i in ids if i > seen):
                text = (offsets_dir / str(b)).read_text().splitlines()
                try:
                    planned = json.loads(text[2])[topic]
                except (IndexError, KeyError, ValueError):
                    break  # still being written
                if all(int(planned.get(str(p), 0)) >= end for p, end in enumerate(ends)):
                    self.last_planned = b
                    return b
                seen = b
            now = time.monotonic()
            if now - started > WAIT_S:
                raise TimeoutError(f"{self.label}: no batch planned for {what}")
            if now - last > STATUS_S:
                last = now
                log(f"{self.label}: waiting for the batch of {what} ({now - started:.0f} s)")
            time.sleep(0.05)

    def drain(self) -> None:
        """Wait until every batch has finished and nothing routed is left unread (chunks included)."""
        started = last = time.monotonic()
        while True:
            self._check_query()
            ends = self.router.routed.high()
            p = self.query.lastProgress
            status = self.query.status
            if p is not None and not status["isTriggerActive"]:
                done = json.loads(p.json)
                planned = done["sources"][0]["endOffset"]
                planned = json.loads(planned) if isinstance(planned, str) else planned
                mine = planned.get(self.spec.topics["routed"], {})
                if all(int(mine.get(str(q), 0)) >= end for q, end in enumerate(ends)):
                    latest = self._latest_offsets_id()
                    if latest is None or latest <= done["batchId"]:
                        self.collect()
                        return
            now = time.monotonic()
            if now - started > WAIT_S:
                raise TimeoutError(f"{self.label}: did not drain")
            if now - last > STATUS_S:
                last = now
                log(f"{self.label}: draining ({now - started:.0f} s)")
            time.sleep(0.2)

    def _latest_offsets_id(self) -> int | None:
        d = self.checkpoint / "offsets"
        ids = [int(f.name) for f in d.iterdir() if f.name.isdigit()] if d.exists() else []
        return max(ids) if ids else None

    def _check_query(self) -> None:
        if not self.query.isActive:
            raise RuntimeError(f"{self.label}: the query stopped: {self.query.exception()}")

    def collect(self) -> None:
        for p in self.query.recentProgress:
            d = json.loads(p.json)
            if "addBatch" in d["durationMs"]:  # not the progress of a trigger that found no data
                self.progress[int(d["batchId"])] = d

    def plan_update(self, phase: int) -> dict:
        """One planning round from the heavy hitters the router published since the last round."""
        assert self.writer is not None
        load = RouterLoad.empty(WORKERS)
        codec = AvroCodec("io.ballast.MetricsRecord")
        for m in self.metrics.read_new():
            rec = codec.decode(m.value())
            branch, body = rec["body"]
            if branch == ROUTER_KEY_STATS:
                load.add(body)
        started = time.perf_counter()
        current = RoutingTable(WORKERS, self.table) if self.table else None
        plan = plan_from_load(load, WORKERS, self.params.theta, current)
        new = dict(plan_table(plan))
        plan_s = time.perf_counter() - started
        assign = {k.decode(): w for k, w in new.items() if self.table.get(k) != w}
        unassign = [k.decode() for k in self.table if k not in new]
        epoch = self.router.epoch
        if assign or unassign:
            event = self.writer.send(*routing_update(assign, unassign, reason=f"bench-reduce phase {phase}"))
            epoch = int(event["epoch"])
            self.router.await_epoch(epoch)
        self.table = new
        info = {
            "phase": phase,
            "epoch": epoch,
            "heavy_hitters": len(load.heavy_hitters),
            "table": len(new),
            "assign": len(assign),
            "unassign": len(unassign),
            "feasible": bool(plan.feasible),
            "planned_max_over_mean": round(
                float(plan.predicted_loads.max() / plan.predicted_loads.mean()), 3
            ),
            "plan_ms": round(plan_s * 1000, 1),
        }
        self.updates_sent.append(info)
        return info

    def stop_query(self) -> None:
        self.collect()
        if self.query.isActive:
            self.query.stop()

    def close(self) -> None:
        try:
            self.stop_query()
        finally:
            self.router.close()
            self.metrics.close()
            if self.writer is not None:
                self.writer.close()

    # --- what happened, per batch --------------------------------------------------------------------------

    def batches(self) -> list[Batch]:
        """Every batch with its slice and per-worker figures (WorkerStats or load rows).

        Kinds: ``warmup`` (before the first slice: the markers of the router's first assignment,
        and Spark's first-batch start-up), ``prefix`` / ``slice`` (the batch planned for that
        slice), ``partial`` (data of a slice read before the batch that completed it: an idle query
        can see the commit markers of some partitions before others), ``extra`` (no data: chunks
        written by the previous batch, or nothing).
        """
        by_slice = {b: s for s, b in self.slice_batches.items()}
        mapped = sorted(by_slice)
        out: list[Batch] = []
        for bid in sorted(self.progress):
            d = self.progress[bid]
            start = int(datetime.fromisoformat(d["timestamp"].replace("Z", "+00:00")).timestamp() * 1000)
            dur = {k: int(v) for k, v in d["durationMs"].items()}
            b = Batch(bid, start, dur.get("triggerExecution", 0), int(d["numInputRows"]), dur)
            if bid in by_slice:
                b.slice = by_slice[bid]
                b.kind = "prefix" if b.slice[1] == 0 else "slice"
                b.phase = b.slice[0]
            out.append(b)
        self._attach_worker_figures(out)
        for b in out:
            if b.kind != "extra":
                continue
            if (not mapped or b.id < mapped[0]) and not sum(b.worker_records):
                b.kind = "warmup"
                continue
            later = [m for m in mapped if m > b.id]
            earlier = [m for m in mapped if m < b.id]
            if sum(b.worker_records) and later:
                b.kind, b.phase = "partial", by_slice[later[0]][0]
                next(x for x in out if x.id == later[0]).split = True
            elif earlier:
                b.phase = by_slice[earlier[-1]][0]
        return out

    def _attach_worker_figures(self, batches: list[Batch]) -> None:
        def batch_at(t: int) -> Batch | None:
            # batches of one query never overlap; the slack covers clock rounding (ms timestamps)
            for slack in (0, 200):
                for b in batches:
                    if b.start_ms - slack <= t <= b.start_ms + b.duration_ms + slack:
                        return b
            return None

        tail = TopicTail(self.kafka, self.layout.name("metrics"), 1)
        msgs = tail.read_new(120)
        tail.close()
        records: dict[int, np.ndarray] = defaultdict(lambda: np.zeros(WORKERS, dtype=np.int64))
        busy: dict[int, np.ndarray] = defaultdict(lambda: np.zeros(WORKERS))
        if self.spark_grouping:
            for m in msgs:
                if m.key() != b"bench-load":
                    continue
                part, n, late = struct.unpack(LOAD_ROW, m.value())
                b = batch_at(m.timestamp()[1])
                if b is not None and 0 <= part < WORKERS:
                    records[b.id][part] += n
                    b.late += late
        else:
            codec = AvroCodec("io.ballast.MetricsRecord")
            lat99: dict[int, list[float]] = defaultdict(list)
            lat50: dict[int, list[float]] = defaultdict(list)
            for m in msgs:
                rec = codec.decode(m.value())
                branch, s = rec["body"]
                if branch != WORKER_STATS or not rec["source"].startswith(f"{self.job}/"):
                    continue
                b = batch_at(int(rec["interval_end"]))
                if b is None:
                    continue
                w = int(s["worker"])
                records[b.id][w] += int(s["records"])
                busy[b.id][w] += float(s["busy_ms"])
                if s["records"]:
                    lat99[b.id].append(float(s["flow_latency_p99_ms"]))
                    lat50[b.id].append(float(s["flow_latency_p50_ms"]))
                b.chunks_sent += len(s["chunks_sent"])
                b.chunks_installed += len(s["chunks_installed"])
                b.held += int(s["held_records"])
                b.pending = max(b.pending, int(s["pending_keys"]))
                b.late += int(s["late_records"])
            for b in batches:
                b.latency_p99_ms = max(lat99[b.id], default=0.0)
                b.latency_p50_ms = float(np.median(lat50[b.id])) if lat50[b.id] else 0.0
        for b in batches:
            b.worker_records = records[b.id].tolist()
            b.worker_busy_ms = [round(x, 1) for x in busy[b.id].tolist()]


# --- the runs -----------------------------------------------------------------------------------------------


def run_phase(pl: Placement, slices: list[Slice]) -> None:
    """Release a phase's slices into one placement, each as soon as the previous one's batch is planned."""
    t0 = time.monotonic()
    for s in slices:
        if s.index == 0 and pl.updates:
            pl.metrics.read_new()  # skip what earlier slices published: plan from the prefix alone
        ends = pl.release(s)
        what = f"phase {s.phase} {s.kind} {s.index}"
        pl.slice_batches[(s.phase, s.index)] = pl.planned_batch(ends, what)
        if s.index == 0 and pl.updates:
            info = pl.plan_update(s.phase)
            log(
                f"{pl.label}: phase {s.phase} plan: {info['assign']} assigned, {info['unassign']} back "
                f"to hash, table {info['table']}, planned max/mean {info['planned_max_over_mean']}, "
                f"epoch {info['epoch']}"
            )
    pl.drain()
    durs = [
        pl.progress[b]["durationMs"]["triggerExecution"] / 1000
        for (ph, _i), b in pl.slice_batches.items()
        if ph == slices[0].phase and b in pl.progress
    ]
    log(
        f"{pl.label}: phase {slices[0].phase} done in {time.monotonic() - t0:.0f} s, "
        f"batches {[round(d, 1) for d in durs]} s"
    )


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else 0.0


def summarize(pl: Placement, batches: list[Batch]) -> dict:
    measured = [b for b in batches if b.kind != "warmup"]
    full = [b for b in measured if b.kind == "slice" and not b.split]
    durs = [b.duration_ms for b in full]
    data_records = sum(pl.slice_records.values())
    total_ms = sum(b.duration_ms for b in measured)
    ratios = [max(b.worker_records) / np.mean(b.worker_records) for b in full if sum(b.worker_records)]
    return {
        "placement": pl.label,
        "full_slice_batches": len(full),
        "batches": len(measured),
        "partial_batches": sum(1 for b in measured if b.kind == "partial"),
        "split_slices_left_out": sum(1 for b in measured if b.kind == "slice" and b.split),
        "extra_batches": sum(1 for b in measured if b.kind == "extra"),
        "warmup_ms": sum(b.duration_ms for b in batches if b.kind == "warmup"),
        "batch_p50_ms": round(pct(durs, 50)),
        "batch_p99_ms": round(pct(durs, 99)),
        "batch_max_ms": max(durs, default=0),
        "all_batches_p50_ms": round(pct([b.duration_ms for b in measured], 50)),
        "records": data_records,
        "batch_time_s": round(total_ms / 1000, 1),
        "records_per_s": round(data_records / (total_ms / 1000), 1) if total_ms else 0.0,
        "load_max_over_mean_mean": round(float(np.mean(ratios)), 3) if ratios else None,
        "load_max_over_mean_max": round(float(np.max(ratios)), 3) if ratios else None,
        "late_records": sum(b.late for b in measured),
        **busiest_worker(full),
    }


def busiest_worker(full: list[Batch]) -> dict:
    """The busiest worker's step time per batch (sleep + engine work; WorkerStats ``busy_ms``, so
    Ballast placements only) and the rest of the batch: Spark's part, which no placement changes."""
    busy = [max(b.worker_busy_ms) for b in full if b.worker_busy_ms and max(b.worker_busy_ms) > 0]
    if not busy:
        return {}
    rest = [b.duration_ms - max(b.worker_busy_ms) for b in full if b.worker_busy_ms]
    return {
        "busiest_worker_p50_ms": round(pct(busy, 50)),
        "busiest_worker_p99_ms": round(pct(busy, 99)),
        "batch_minus_busiest_p50_ms": round(pct(rest, 50)),
    }


def migration_latency(batches: list[Batch]) -> dict:
    """Acceptance 3 in (c): keys not being moved, while a migration is under way vs steady state.

    Compared within each phase (the machine's load drifts between phases):

    * duration: batches with a migration under way (chunks shipped / installed, records held)
      vs the phase's full-slice batches without;
    * flow latency p99 (records of keys not waiting for a chunk, append -> processing, max over
      workers): a record waits in the backlog while the previous batch runs, so a batch is
      *affected* when it or its predecessor had a migration under way; the reference is the
      phase's full-slice batches where neither had.
    """
    measured = [b for b in batches if b.kind != "warmup"]
    phases: list[dict] = []
    for phase in sorted({b.phase for b in measured if b.phase >= 0}):
        rows = [b for b in measured if b.phase == phase]
        full = [b for b in rows if b.kind == "slice" and not b.split]
        moving = [b for b in rows if b.kind != "prefix" and b.migrating]
        steady = [b for b in full if not b.migrating]
        prev = {b.id: p for p, b in zip([None, *measured[:-1]], measured, strict=True)}
        affected = [b for b in full if b.migrating or (prev[b.id] is not None and prev[b.id].migrating)]
        calm = [b for b in full if b not in affected]
        row: dict[str, Any] = {"phase": phase, "migration_batches": [b.id for b in moving]}
        if moving and steady:
            ref = float(np.median([b.duration_ms for b in steady]))
            row["steady_batch_ms"] = round(ref)
            row["migration_batch_ms"] = [b.duration_ms for b in moving]
            row["batch_duration_ratio"] = round(max(b.duration_ms for b in moving) / ref, 3)
        if affected and calm:
            ref = float(np.median([b.latency_p99_ms for b in calm]))
            row["steady_flow_latency_p99_ms"] = round(ref)
            row["affected_flow_latency_p99_ms"] = [round(b.latency_p99_ms) for b in affected]
            row["flow_latency_p99_ratio"] = round(max(b.latency_p99_ms for b in affected) / ref, 3)
        phases.append(row)
    dur = [p["batch_duration_ratio"] for p in phases if "batch_duration_ratio" in p]
    lat = [p["flow_latency_p99_ratio"] for p in phases if "flow_latency_p99_ratio" in p]
    return {
        "per_phase": phases,
        "batch_duration_ratio_max": max(dur, default=None),
        "batch_duration_ratio_median": round(float(np.median(dur)), 3) if dur else None,
        "flow_latency_p99_ratio_max": max(lat, default=None),
        "flow_latency_p99_ratio_median": round(float(np.median(lat)), 3) if lat else None,
        "target_ratio_max": 2.0,
    }


def batch_rows(batches: list[Batch]) -> list[dict]:
    out = []
    for b in batches:
        d = asdict(b)
        d["durations"] = {
            k: v
            for k, v in b.durations.items()
            if k
            in ("addBatch", "queryPlanning", "latestOffset", "walCommit", "commitOffsets", "triggerExecution")
        }
        out.append(d)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a small smoke run (a few minutes)")
    for name, default in asdict(Params()).items():
        ap.add_argument(
            f"--{name.replace('_', '-')}", type=type(default), default=None, help=f"default {default}"
        )
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "reduce.json"))
    args = ap.parse_args(argv)
    values = asdict(Params()) | (QUICK if args.quick else {})
    values |= {k: v for k, v in vars(args).items() if k in values and v is not None}
    params = Params(**values)
    out = Path(args.out)
    if args.quick and args.out == ap.get_default("out"):
        out = out.with_name("reduce-quick.json")

    workdir = Path(tempfile.mkdtemp(prefix="ballast-bench-reduce-"))
    log(f"starting a broker in {workdir}; params {asdict(params)}")
    started = time.monotonic()
    stack = start_stack(workdir / "stack", brokers=1)
    placements: list[Placement] = []
    spark = None
    try:
        kafka = KafkaConfig.plaintext(stack.bootstrap, "bench-reduce")
        admin = make_admin(kafka)
        from spark_jobs.reduce.job import SPARK_CONF
        from spark_jobs.session import local_spark

        conf = {
            **SPARK_CONF,
            "spark.sql.streaming.noDataMicroBatches.enabled": "false",
            "spark.sql.warehouse.dir": str(workdir / "warehouse"),
            "spark.sql.streaming.numRecentProgressUpdates": "1000",
            "spark.ui.showConsoleProgress": "false",
        }
        spark = local_spark(
            "ballast-bench-reduce", cores=WORKERS, shuffle_partitions=WORKERS, conf=conf, log_level="ERROR"
        )
        log(f"spark up ({time.monotonic() - started:.0f} s)")
        specs = {
            "a": ("a", "(a) spark groupBy(key)", True, False),
            "b": ("b", "(b) ballast hash only", False, False),
            "c": ("c", "(c) ballast + routing updates", False, True),
        }
        main_pl: list[Placement] = []
        for key, (name, label, sg, up) in specs.items():
            if key in params.placements:
                main_pl.append(
                    Placement(
                        name, label, sg, up, params.record_cost_us, params, kafka, admin, spark, workdir
                    )
                )
                placements.append(main_pl[-1])
        log(f"placements ready ({time.monotonic() - started:.0f} s)")
        workload = Workload(params.keys, params.z, params.seed)
        sizes = [params.prefix_records] + [params.slice_records] * params.slices
        for phase in range(params.phases):
            slices = workload.phase(phase, sizes)
            for pl in main_pl:
                run_phase(pl, slices)
            log(f"phase {phase + 1}/{params.phases} done ({time.monotonic() - started:.0f} s)")

        for pl in main_pl:
            pl.stop_query()  # an idle query still asks the broker for offsets at every trigger
        uni_pl: list[Placement] = []
        for key, (_name, label, sg, _up) in specs.items():
            if key in "ab" and key in params.placements:
                uni = Placement(
                    f"u{key}", f"uniform {label[:3]}", sg, False, 0.0, params, kafka, admin, spark, workdir
                )
                uni_pl.append(uni)
                placements.append(uni)
        uniform = Workload(params.keys, 0.0, params.seed + 5)
        for rnd in range(params.uniform_rounds):
            slices = uniform.phase(rnd, [params.uniform_slice_records] * params.uniform_slices)
            for s in slices:
                s.index += 1  # no prefix here: every slice is a full one
            for pl in uni_pl:
                run_phase(pl, slices)
            log(f"uniform round {rnd + 1}/{params.uniform_rounds} done ({time.monotonic() - started:.0f} s)")

        report = build_report(params, main_pl, uni_pl, time.monotonic() - started)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=2) + "\n")
        plot(report, out.with_suffix(".png"))
        print_summary(report)
        log(f"wrote {out} and {out.with_suffix('.png')} ({time.monotonic() - started:.0f} s)")
    finally:
        for pl in placements:
            try:
                pl.close()
            except Exception as exc:  # keep closing the others
                log(f"closing {pl.label}: {exc}")
        if spark is not None:
            spark.stop()
        stop_stack(workdir / "stack", purge=True)
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


def build_report(params: Params, main_pl: list[Placement], uni_pl: list[Placement], elapsed: float) -> dict:
    results: dict[str, Any] = {}
    series: dict[str, list[dict]] = {}
    for pl in main_pl:
        batches = pl.batches()
        results[pl.name] = summarize(pl, batches)
        series[pl.name] = batch_rows(batches)
        if pl.updates:
            results[pl.name]["updates"] = pl.updates_sent
            results[pl.name]["unmoved_keys_during_migration"] = migration_latency(batches)
    uniform: dict[str, Any] = {}
    for pl in uni_pl:
        batches = pl.batches()
        uniform[pl.name] = summarize(pl, batches)
        series[pl.name] = batch_rows(batches)
    accept: dict[str, Any] = {}
    if "b" in results and "c" in results and results["c"]["batch_p99_ms"]:
        accept["c_vs_b_p99_improvement"] = round(
            results["b"]["batch_p99_ms"] / results["c"]["batch_p99_ms"], 3
        )
        accept["c_vs_b_p50_improvement"] = round(
            results["b"]["batch_p50_ms"] / results["c"]["batch_p50_ms"], 3
        )
        accept["target_p99_improvement"] = 1.5
    if "a" in results and "c" in results and results["c"]["batch_p99_ms"]:
        accept["c_vs_a_p99_improvement"] = round(
            results["a"]["batch_p99_ms"] / results["c"]["batch_p99_ms"], 3
        )
    if "ua" in uniform and "ub" in uniform and uniform["ua"]["records_per_s"]:
        accept["uniform_b_over_a_throughput"] = round(
            uniform["ub"]["records_per_s"] / uniform["ua"]["records_per_s"], 3
        )
    if "c" in results:
        m = results["c"]["unmoved_keys_during_migration"]
        accept["unmoved_flow_latency_p99_ratio_max"] = m.get("flow_latency_p99_ratio_max")
        accept["unmoved_batch_duration_ratio_max"] = m.get("batch_duration_ratio_max")
    return {
        "params": asdict(params),
        "workers": WORKERS,
        "input_partitions": INPUT_PARTITIONS,
        "spark_master": f"local[{WORKERS}]",
        "elapsed_s": round(elapsed),
        "notes": {
            "batch": "triggerExecution of the full-slice batches (one slice each, same in every placement)",
            "records_per_s": "data records / sum of the placement's batch durations (warm-up excluded)",
            "load": "data records per worker (WorkerStats) or Spark partition (a): max/mean per full slice",
            "migration": "(c) per phase: batches with chunks shipped/installed or records held vs the others",
        },
        "acceptance": accept,
        "results": results,
        "uniform": uniform,
        "batches": series,
    }


def print_summary(report: dict) -> None:
    print()
    print(f"{'placement':<34}{'p50 s':>8}{'p99 s':>8}{'rec/s':>10}{'load max/mean':>15}{'worst':>8}")
    for r in [*report["results"].values(), *report["uniform"].values()]:
        print(
            f"{r['placement']:<34}{r['batch_p50_ms'] / 1000:>8.1f}{r['batch_p99_ms'] / 1000:>8.1f}"
            f"{r['records_per_s']:>10,.0f}{r['load_max_over_mean_mean'] or 0:>15.2f}"
            f"{r['load_max_over_mean_max'] or 0:>8.2f}"
        )
    for k, v in report["acceptance"].items():
        print(f"  {k}: {v}")


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axs = plt.subplots(1, 4, figsize=(22, 4.8))
    colors = {"a": "tab:gray", "b": "tab:red", "c": "tab:blue", "ua": "tab:gray", "ub": "tab:red"}
    per_phase = report["params"]["slices"]
    for name, r in report["results"].items():
        rows = [b for b in report["batches"][name] if b["kind"] == "slice" and not b["split"]]
        x = np.arange(len(rows))
        style = {"ms": 3, "color": colors[name], "label": r["placement"]}
        axs[0].plot(x, [b["duration_ms"] / 1000 for b in rows], "o-", **style)
        records = [b["worker_records"] for b in rows]
        axs[1].plot(x, [max(w) / np.mean(w) if sum(w) else np.nan for w in records], "o-", **style)
    for ax, title, ylabel in (
        (axs[0], "micro-batch duration (full slices)", "s"),
        (axs[1], "per-worker load max/mean (records) per batch", "max/mean"),
    ):
        for edge in range(per_phase, per_phase * report["params"]["phases"], per_phase):
            ax.axvline(edge - 0.5, color="0.8", lw=1)
        ax.set_title(title)
        ax.set_xlabel(f"full-slice batch ({per_phase} per phase; the hot set shifts at the grey lines)")
        ax.set_ylabel(ylabel)
        ax.legend(fontsize=8)
    if "c" in report["results"]:
        rows = [b for b in report["batches"]["c"] if b["kind"] in ("prefix", "slice", "partial")]
        moving = [bool(b["chunks_sent"] or b["chunks_installed"] or b["held"] or b["pending"]) for b in rows]
        after = [False, *moving[:-1]]
        color = [
            "tab:orange" if m else "navajowhite" if a else "tab:blue"
            for m, a in zip(moving, after, strict=True)
        ]
        x = np.arange(len(rows))
        axs[2].bar(x, [b["latency_p99_ms"] / 1000 for b in rows], color=color, label="flow latency p99")
        axs[2].plot(x, [b["duration_ms"] / 1000 for b in rows], "k.-", ms=3, label="batch duration")
        axs[2].set_title(
            "(c) keys not moved: flow latency p99 per batch\n(orange: migration under way, light: after one)"
        )
        axs[2].set_xlabel("batch (prefixes included)")
        axs[2].set_ylabel("s")
        axs[2].legend(fontsize=8)
    uni = report["uniform"]
    if uni:
        names = list(uni)
        rates = [uni[n]["records_per_s"] for n in names]
        axs[3].bar(range(len(names)), rates, color=[colors[n] for n in names])
        for i, v in enumerate(rates):
            axs[3].annotate(f"{v:,.0f}", (i, v), ha="center", va="bottom", fontsize=9)
        axs[3].set_title("uniform keys, no record cost: records/s")
        axs[3].set_xticks(range(len(names)), [uni[n]["placement"] for n in names], fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    sys.exit(main())
