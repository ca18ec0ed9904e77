"""One contender's run over a backlog: started fresh, read to the end, stopped, its figures kept.

Contenders (each a process with a ``local[cores]`` Spark of its own, a new checkpoint per run):

* ``ballast``: the reduce job (``ballast reduce run``, hash only: no routing update was ever sent,
  so it ships nothing), its output topic the deployment's;
* ``native-rocksdb`` / ``native-hdfs``: :mod:`bench.reduce.native` on Ballast's RocksDB store
  configuration or on Spark's default store, writing to the same output topic;
* ``partition-stage``: :mod:`bench.reduce.partition_stage`, a prototype with no state operator
  (one task per routed partition, local state and a compacted changelog topic), writing to the
  same output topic. Its watermark is its own (Spark reports none for a query without a
  watermark operator): each batch's is read from the stage's log. It runs no batch without new
  records, so its run ends on the settle wait.
* ``partition-stage-direct``: the same prototype whose tasks write their closed windows themselves
  (``--task-writes-output``): one Spark job a batch instead of a cached one read twice.
* ``partition-stage-eos``: the direct stage with one Kafka transaction per task (``--exactly-once``):
  what the design costs once its output is exactly once and its state recoverable.

A run is over once a batch has read the routed topic to its ends and the batch after it (no data:
the watermark moved past the last windows, which both contenders then write) has run, or nothing
more ran for a while. What each run wrote is read back from the output topic (from where it
stood when the run began) and kept for the correctness check.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from ballast.avro.codec import AvroCodec
from ballast.cli.connection import ConnectionSettings
from ballast.harness.pipeline import Pipeline
from ballast.kafka.follow import TopicFollower
from ballast.metrics.records import WorkerStats
from bench.reduce.backlog import Backlog
from bench.reduce.cpu import CpuSampler
from bench.reduce.params import ROOT, STATUS_S, WAIT_S, WORKERS, log
from bench.reduce.progress import of_spark
from bench.reduce.sparklog import batches as progress_batches
from bench.reduce.sparklog import progress_conf
from spark_jobs.query_progress import iso_ms

CONTENDERS = {
    "ballast": "Ballast aggregate (hash only, RocksDB)",
    "ballast-2w": "Ballast aggregate (hash only, 2 workers)",
    # paced runs only (its router routes live): the controller's loop moves hot keys as they drift
    "ballast-routed": "Ballast aggregate + routing updates (controller loop)",
    "native-rocksdb": "native, RocksDB state store",
    "native-hdfs": "native, Spark's default store",
    "partition-stage": "prototype: per-partition stage, no state operator",
    "partition-stage-direct": "prototype: per-partition stage, tasks write their windows",
    "partition-stage-eos": "prototype: per-partition stage, one transaction per task (exactly once)",
    "peer-1s": "groupBy(key) transformWithState, P = S",
    "peer-4s": "groupBy(key) transformWithState, P = 4S",
    "peer-8s": "groupBy(key) transformWithState, P = 8S",
    "apply-1s": "groupBy(key) applyInPandasWithState, P = S",
    "apply-4s": "groupBy(key) applyInPandasWithState, P = 4S",
    "apply-8s": "groupBy(key) applyInPandasWithState, P = 8S",
}
# bench.reduce.peer's contenders: (shuffle partitions per task slot, its --api, its --store)
PEERS = {
    **{f"peer-{k}s": (k, "tws", "rocksdb") for k in (1, 4, 8)},
    # applyInPandasWithState can use Spark's default store, the faster one (the throughput part)
    **{f"apply-{k}s": (k, "apply", "hdfs") for k in (1, 4, 8)},
}
MODULES = {  # the rest: bench.reduce.native
    "partition-stage": "bench.reduce.partition_stage",
    "partition-stage-direct": "bench.reduce.partition_stage",
    "partition-stage-eos": "bench.reduce.partition_stage",
    **dict.fromkeys(PEERS, "bench.reduce.peer"),
}
BALLAST = ("ballast", "ballast-2w", "ballast-routed")  # contenders that are Ballast's reduce job
# the prototype's ways to write windows: the driver's sink, the tasks, the tasks in transactions
STAGES = ("partition-stage", "partition-stage-direct", "partition-stage-eos")
STAGE_FLAGS = {"partition-stage-direct": ["--task-writes-output"], "partition-stage-eos": ["--exactly-once"]}
STAGE_LOG = "stage.jsonl"
SETTLE_S = 15.0  # after the last data batch: how long to wait for the batch that closes the last windows


def workers_of(contender: str) -> int:
    """The routed partitions (= Ballast's workers) of the backlog a contender reads: ``ballast-<N>w``
    N, every other the benchmark's 8 (the peers shuffle by key whatever the routed partitions)."""
    m = re.fullmatch(r"ballast-(\d+)w", contender)
    return int(m.group(1)) if m else WORKERS


@dataclass(frozen=True)
class RunSettings:
    """What every contender of a comparison shares."""

    cap: int  # maxOffsetsPerTrigger
    cores: int  # local[cores]
    trigger: str
    window_ms: int
    watermark_delay: str
    spark_conf: tuple[str, ...] = ()  # KEY=VALUE pairs for every contender's Spark
    record_cost_us: float = 0.0  # simulated work per record (Ballast and the peers; the natives have none)
    record_cost_kind: str = "cpu"  # spark_jobs.record_cost: cpu or sleep
    java_options: str = ""  # more options for every contender's JVM (no commas: --spark-conf splits there)

    @property
    def window(self) -> str:
        return f"{self.window_ms} milliseconds"

    @property
    def processor(self) -> str:
        return f"aggregate:size={self.window_ms}ms"


@dataclass
class Run:
    contender: str
    backlog: str
    round: int
    job: str
    startup_s: float  # process start to the first batch's start
    batches: list[dict]  # every batch (see :func:`batch_row`)
    workers: list[dict] = field(default_factory=list)  # Ballast: one row per worker step
    results: pd.DataFrame | None = None  # the windows it wrote (key, window_start) -> figures
    output_records: int = 0
    wall_s: float = 0.0


def batch_row(p: dict[str, Any], topic: str) -> dict[str, Any]:
    """What the benchmark keeps of a batch's progress: rows, durations, watermark, end offsets, and
    the state operators' metrics."""
    b = of_spark(p, topic, WORKERS)
    assert b is not None
    ops = []
    for op in p.get("stateOperators", ()):
        ops.append(
            {
                k: op.get(k)
                for k in (
                    "operatorName",
                    "numRowsTotal",
                    "numRowsUpdated",
                    "numRowsRemoved",
                    "allUpdatesTimeMs",
                    "allRemovalsTimeMs",
                    "commitTimeMs",
                    "memoryUsedBytes",
                    "customMetrics",
                )
            }
        )
    event_time = p.get("eventTime", {})
    wm = event_time.get("watermark")
    return {
        "id": b.id,
        "start_ms": b.start_ms,
        "rows": b.input_rows,
        "duration_ms": b.duration_ms,
        "durations": b.durations,
        "end_offsets": b.end_offsets,
        "watermark_ms": iso_ms(wm),
        "max_event_ms": iso_ms(event_time.get("max")),
        "state": ops,
    }


def output_ends(pipe: Pipeline) -> dict[int, int]:
    with TopicFollower(pipe.kafka, pipe.layout.name("output")) as f:
        return f.end_offsets()


def read_results(pipe: Pipeline, start: dict[int, int], job: str) -> tuple[pd.DataFrame, int]:
    """The windows ``job`` wrote since ``start``: one row per record, indexed by (key, window_start)."""
    codec = AvroCodec("io.ballast.OutputResult")
    with TopicFollower(pipe.kafka, pipe.layout.name("output"), start) as f:
        messages = f.read_to_end(300)
    rows = []
    for m in messages:
        r = codec.decode(m.value())
        if r["job"] == job:
            rows.append((r["key"], r["window_start"], r["window_end"], r["count"], r["sum"], r["min"],
                         r["max"], r["mean"], r["revision"], r["excluded_records"], r["worker"]))  # fmt: skip
    columns = [
        "key",
        "window_start",
        "window_end",
        "count",
        "sum",
        "min",
        "max",
        "mean",
        "revision",
        "excluded",
        "worker",  # the reduce worker that wrote the window (-1: a query without workers)
    ]
    frame = pd.DataFrame(rows, columns=columns)
    return frame, len(messages)


class _Process:
    """A contender's process: the job as a service of the backlog's pipeline, or the native query."""

    def __init__(self, contender: str, backlog: Backlog, job: str, s: RunSettings, folder: Path) -> None:
        self.contender = contender
        self.pipe = backlog.pipe
        self.folder = folder
        pair, self.progress_path = progress_conf(folder, s.java_options)
        spark_conf = (pair, *s.spark_conf)
        self.proc: subprocess.Popen | None = None
        self.service = ""
        cost: dict[str, Any] = {}
        if s.record_cost_us:
            cost = {"record_cost_us": s.record_cost_us, "record_cost_kind": s.record_cost_kind}
        if contender in BALLAST:
            command = self.pipe.reduce(
                job,
                s.processor,
                checkpoint=folder / "checkpoint",
                local_cores=s.cores,
                watermark_delay=s.watermark_delay,
                trigger=s.trigger,
                max_offsets_per_trigger=s.cap,
                spark_conf=spark_conf,
                spark_log=folder / "spark.log",
                **cost,
            )
            self.service = command.name
            self.pipe.start(command, wait=False)
            return
        partitions = WORKERS
        if contender in STAGES:
            own = [
                "--stage-state-dir", str(folder / "state"),
                "--changelog-topic", f"{self.pipe.layout.name('routed')}-{job}-changelog",
                "--stage-log", str(folder / STAGE_LOG),
                *STAGE_FLAGS.get(contender, []),
            ]  # fmt: skip
        elif contender in PEERS:
            per_slot, api, store = PEERS[contender]
            partitions = per_slot * s.cores
            own = [
                "--processor", s.processor, "--api", api, "--store", store,
                *(f"--{k.replace('_', '-')}={v}" for k, v in cost.items()),
            ]  # fmt: skip
        else:
            own = ["--store", contender.removeprefix("native-")]
        argv = [
            sys.executable,
            "-m",
            MODULES.get(contender, "bench.reduce.native"),
            *ConnectionSettings.of(self.pipe.kafka, folder).to_argv(),
            "--topic", self.pipe.layout.name("routed"),
            "--output-topic", self.pipe.layout.name("output"),
            "--job", job,
            *own,
            "--checkpoint", str(folder / "checkpoint"),
            "--window", s.window,
            "--watermark-delay", s.watermark_delay,
            "--trigger", s.trigger,
            "--max-offsets-per-trigger", str(s.cap),
            "--local-cores", str(s.cores),
            "--partitions", str(partitions),
            "--spark-log", str(folder / "spark.log"),
            "--spark-conf", ",".join(spark_conf),
        ]  # fmt: skip
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH")))),
        }
        self.log_path = folder / "native.log"
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT, start_new_session=True
            )

    def check(self) -> None:
        if self.service:
            self.pipe.check_running(self.service)
        elif self.proc is not None and self.proc.poll() is not None:
            tail = self.log_path.read_text(errors="replace").splitlines()[-40:]
            raise RuntimeError(f"{self.contender} exited ({self.proc.returncode}):\n" + "\n".join(tail))

    def stop(self) -> None:
        if self.service:
            self.pipe.stop(self.service, timeout=120)
            self.service = ""
            return
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(120)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(30)
        self.proc = None


def run(
    contender: str, backlog: Backlog, rnd: int, s: RunSettings, workdir: Path, *, results: bool = True
) -> Run:
    """One contender's run over the whole backlog (see the module docstring)."""
    job = f"{contender}-{backlog.name}-r{rnd}"
    folder = workdir / f"run-{job}"
    out_start = output_ends(backlog.pipe)
    started = time.monotonic()
    started_ms = int(time.time() * 1000)
    sampler = CpuSampler(str(folder))  # in the command lines of the contender's processes
    sampler.start()
    proc = _Process(contender, backlog, job, s, folder)
    topic = backlog.pipe.layout.name("routed")
    try:
        seen = _wait_done(proc, backlog, job, closing_batch=contender not in STAGES)
    finally:
        proc.stop()
        sampler.stop()
    wall = time.monotonic() - started
    rows = [batch_row(p, topic) for _, p in sorted(seen.items())]
    for row in rows:
        row["cpu_s"] = sampler.between(row["start_ms"], row["start_ms"] + row["duration_ms"])
    if contender in STAGES:
        stage_watermarks(rows, folder / STAGE_LOG)
    first = rows[0]["start_ms"] if rows else started_ms
    r = Run(contender, backlog.name, rnd, job, (first - started_ms) / 1000, rows, wall_s=wall)
    if contender in BALLAST:
        r.workers = worker_rows(backlog.pipe, job)
    if results:
        r.results, r.output_records = read_results(backlog.pipe, out_start, job)
    return r


def stage_watermarks(rows: list[dict], path: Path) -> None:
    """Each batch's watermark and max event time so far, from the partition stage's own log."""
    logged = {}
    for line in path.read_text().splitlines() if path.exists() else ():
        entry = json.loads(line)
        if "batch" in entry:
            logged[entry["batch"]] = entry
        elif "plan" in entry:
            log(f"partition stage: {entry['exchanges']} Exchange in the executed plan:\n{entry['plan']}")
    for row in rows:
        entry = logged.get(row["id"])
        if entry is not None:
            row["watermark_ms"] = entry["watermark_ms"]
            row["max_event_ms"] = entry["max_seen_ms"]
            keep = (
                "late",
                "state_rows",
                "changelog_records",
                "task_ms",
                "worker_pids",
                "cache_reads",
                "restored",
                "phase_ms",
                "driver_s",
            )
            row["stage"] = {k: entry.get(k) for k in keep}


def _wait_done(proc: _Process, backlog: Backlog, job: str, *, closing_batch: bool = True) -> dict[int, dict]:
    """Every batch's progress, once one read the backlog to its ends and (``closing_batch``: a
    stateful query) the no-data batch after it ran, or nothing more ran for a while."""
    topic = backlog.pipe.layout.name("routed")
    started = last = time.monotonic()
    covered_at: float | None = None
    covering = -1
    observe = getattr(backlog, "observe", None)  # a backlog that fills as the run goes (paced)
    while True:
        proc.check()
        seen = progress_batches(proc.progress_path)
        if observe is not None:
            observe(seen)
        if covered_at is None:
            for bid, p in sorted(seen.items()):
                b = of_spark(p, topic, WORKERS)
                if b is not None and b.covers(backlog.ends):
                    covered_at, covering = time.monotonic(), bid
                    break
        if covered_at is not None and not closing_batch:
            return seen
        if covered_at is not None:
            after = [p for bid, p in seen.items() if bid > covering]
            if after or time.monotonic() - covered_at > SETTLE_S:
                return seen
        now = time.monotonic()
        if now - started > WAIT_S:
            raise TimeoutError(f"{job}: did not read the backlog in {WAIT_S:.0f} s")
        if now - last > STATUS_S:
            last = now
            done = sum(int(p.get("numInputRows", 0)) for p in seen.values())
            log(
                f"{job}: {len(seen)} batches, {done:,} of {backlog.offsets:,} rows read "
                f"({now - started:.0f} s)"
            )
        time.sleep(0.5)


def worker_rows(pipe: Pipeline, job: str) -> list[dict]:
    """Every worker step of ``job`` (``WorkerStats``): when, records, busy time, state size."""
    reader = pipe.metrics()
    reader.read_to_end(120)
    return [
        {
            "at_ms": m.interval_end,
            "worker": s.worker,
            "records": s.records,
            "busy_ms": round(s.busy_ms, 1),
            "state_keys": s.state_keys,
            "state_bytes": s.state_bytes,
            "late": s.late_records,
            "watermark_ms": s.watermark_ms,
            "step": s.step,
            "epoch": s.epoch,
        }
        for m, s in reader.of(WorkerStats, prefix=f"{job}/")
    ]
