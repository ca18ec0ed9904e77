"""Calm: what a micro-batch of the reduce costs when the records do not, at a rate far below its
capacity (``make bench-reduce-calm``).

Why: at the demo's calm rate (600 events/s, 6 workers, a 2 s trigger, no simulated cost) the
reduce's batches took 2 to 3 s and its JVM used most of a core; that, not the records, bounded the
demo's lag and kept two runs from sharing 2 cores. Per-record costs are the throughput part's
business; this part measures the rest: each batch's durations as Spark reports them (its progress,
to a file of its own: :mod:`bench.reduce.sparklog`), the CPU of the job's processes by kind
(:mod:`bench.reduce.cpu`), and the JVM's CPU by thread group, which says who spends it (tasks,
the JIT, the garbage collector, the threads that answer the Python driver).

The run: a router and ``ballast reduce run`` as services on a deployment of their own, input
produced at ``calm_rate`` for ``calm_s`` seconds; the first ``calm_warm_s`` are left out (the JVM
is still compiling Spark's code in its first minutes). Figures are per second of the measured
span, and per batch.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ballast.harness.feed import Feeder, Phase
from ballast.harness.pipeline import Pipeline
from ballast.kafka.configuration import KafkaConfig
from ballast.kafka.topics import TopicLayout
from bench.reduce.backlog import keyed_events
from bench.reduce.cpu import CpuSampler, jvm_threads
from bench.reduce.params import INPUT_PARTITIONS, WAIT_S, Params, log
from bench.reduce.sparklog import batches, progress_conf
from spark_jobs.query_progress import iso_ms

DURATIONS = ("triggerExecution", "addBatch", "queryPlanning", "latestOffset", "walCommit", "commitOffsets")
STATE = ("allUpdatesTimeMs", "commitTimeMs")
ROCKSDB = ("rocksdbCommitFileSyncLatencyMs", "rocksdbCommitCheckpointLatency", "rocksdbCommitFlushLatency")
TOP_THREADS = 8


def _median(values: list[float]) -> float:
    return float(statistics.median(values)) if values else 0.0


def run_calm(params: Params, kafka: KafkaConfig, workdir: Path) -> dict[str, Any]:
    p = params
    layout = TopicLayout(prefix="bench-calm", workers=p.calm_workers, input_partitions=INPUT_PARTITIONS)
    pipe = Pipeline(kafka, layout, workdir / "calm")
    job = "bench-calm"
    conf, progress_file = progress_conf(workdir / "calm-progress")
    try:
        pipe.start(pipe.router("bench-calm-router", name="router", log_level="warning"))
        pipe.start(
            pipe.reduce(
                job,
                p.processor,
                local_cores=2,
                trigger=f"{p.tp_trigger_ms} milliseconds",
                spark_conf=conf,
                log_level="ERROR",
            ),
            wait=False,
        )
        pipe.wait_reduce_caught_up(job, WAIT_S, watch=["router", pipe.reduce_name(job)])
        log(
            f"calm: {p.calm_rate:.0f} events/s for {p.calm_s:.0f} s, the first {p.calm_warm_s:.0f} s left out"
        )
        events = keyed_events(int(p.calm_rate * p.calm_s) + 1, p.calm_keys, p.z, p.seed, 1, 0)
        marker = f"--job-id {job}"
        sampler = CpuSampler(marker)
        sampler.start()
        feeder = Feeder(kafka, layout.name("input"), events, [Phase("calm", p.calm_rate, p.calm_s)])
        began = time.time() * 1000
        feeder.start()
        time.sleep(p.calm_warm_s)
        threads_before, from_ms = jvm_threads(marker), time.time() * 1000
        feeder.join()
        threads_after, to_ms = jvm_threads(marker), time.time() * 1000
        sampler.stop()
        pipe.check_running("router", pipe.reduce_name(job))
    finally:
        pipe.close()
    span_s = (to_ms - from_ms) / 1000
    measured = [b for b in batches(progress_file).values() if from_ms <= iso_ms(b["timestamp"]) <= to_ms]
    ops = [b["stateOperators"][0] for b in measured if b.get("stateOperators")]
    cpu = sampler.between(from_ms, to_ms)
    threads = {k: round(v - threads_before.get(k, 0.0), 2) for k, v in threads_after.items()}
    top = dict(sorted(threads.items(), key=lambda kv: -kv[1])[:TOP_THREADS])
    return {
        "command": "make bench-reduce-calm",
        "params": {
            k: v for k, v in asdict(p).items() if k.startswith("calm_") or k in ("processor", "z", "seed")
        },
        "trigger_ms": p.tp_trigger_ms,
        "measured_s": round(span_s, 1),
        "input_began_ms": began,
        "batches": len(measured),
        "batches_per_s": round(len(measured) / span_s, 3),
        "rows_per_batch_median": _median([b.get("numInputRows", 0) for b in measured]),
        "durations_ms_median": {k: _median([b["durationMs"].get(k, 0) for b in measured]) for k in DURATIONS},
        "state_ms_median": {k: _median([o.get(k, 0) for o in ops]) for k in STATE},  # summed over tasks
        "rocksdb_ms_median": {
            k: _median([o.get("customMetrics", {}).get(k, 0) for o in ops]) for k in ROCKSDB
        },
        "cpu_cores": {k: round(v / span_s, 3) for k, v in cpu.items()},
        "cpu_s_per_batch": {k: round(v / max(1, len(measured)), 3) for k, v in cpu.items()},
        "jvm_threads_cores": {k: round(v / span_s, 3) for k, v in top.items()},
    }


def print_summary(report: dict[str, Any]) -> None:
    d, cores = report["durations_ms_median"], report["cpu_cores"]
    log(
        f"calm: {report['batches']} batches in {report['measured_s']:.0f} s, median "
        f"{d['triggerExecution']:.0f} ms ({report['rows_per_batch_median']:.0f} rows); CPU cores "
        + ", ".join(f"{k} {v:.2f}" for k, v in cores.items())
    )
    log(
        "calm: the JVM's threads (cores): "
        + ", ".join(f"{k} {v:.2f}" for k, v in report["jvm_threads_cores"].items())
    )
