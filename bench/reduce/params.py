"""The benchmark's parameters, its fixed deployment shape, and its log line.

Why one frozen dataclass: every field becomes a flag (``--slice-records``), the report records
them all, and ``--quick`` is a set of overrides of the same fields, so a parameter cannot be added
in one place and forgotten in another.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WORKERS = 8  # routed partitions = reduce workers = Spark state partitions = local cores of each Spark
INPUT_PARTITIONS = 4
START_MS = 1_767_225_600_000  # event time of the first event
PER_MS = 10  # events per ms of event time
WAIT_S = 1800.0  # no single wait of the benchmark may take longer (a stuck run ends here)
STATUS_S = 15.0  # a waiting line every so often, so a slow run is seen to be alive


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
    parts: str = "placements,throughput,soak,calm"  # which parts run (each writes its own JSON and PNG)
    # throughput: Ballast's aggregate against the native query, on a backlog (bench.reduce.throughput)
    tp_events: int = 2_000_000  # events in each key distribution's backlog: 20 batches at the cap
    tp_keys: int = 10_000
    tp_dists: str = "uniform,zipf"
    tp_zipf: float = 1.0
    tp_rounds: int = 2
    tp_cap: int = 100_000  # maxOffsetsPerTrigger of every contender
    tp_cores: int = 2  # local[cores] of every contender's Spark
    tp_trigger_ms: int = 2_000
    tp_window_ms: int = 10_000
    # left out of the steady figures: the JVM compiles Spark's code (C2) over the first batches
    tp_warmup_batches: int = 6
    tp_contenders: str = "ballast,native-rocksdb,native-hdfs,partition-stage"
    # soak: Ballast's aggregate over many batches of new keys (bench.reduce.soak)
    soak_batches: int = 60
    soak_batch_records: int = 50_000
    soak_keys_per_batch: int = 25_000
    soak_batch_event_ms: int = 1_000  # event time each batch of records spans
    soak_warmup_batches: int = 0  # 0: until the state holds every window it keeps
    # calm: the reduce at a rate far below its capacity, where a batch's fixed costs show (bench.reduce.calm)
    calm_rate: float = 600.0  # events/s (the demo's calm rate)
    calm_s: float = 200.0  # seconds of input
    calm_warm_s: float = 110.0  # of those, left out (the JVM compiles Spark's code for the first minutes)
    calm_workers: int = 6  # the demo's
    calm_keys: int = 4_000
    soak_compare_batches: int = 10  # early (after warm-up) and last batches compared
    # skew: per-key CPU work under a drifting hot set, Ballast against groupBy(key) at P = S, 4S, 8S
    # (bench.reduce.skew; S = tp_cores, the same trigger and window as the throughput part)
    sk_events: int = 200_000  # events in each (skew, seed) backlog: 20 batches at the cap
    sk_keys: int = 10_000
    sk_zipfs: str = "0.8,1.0,1.2"
    sk_seeds: int = 5
    sk_phases: int = 4  # the hot set moves this many times over a backlog
    sk_cost_us: float = 200.0  # simulated work per record at the stateful step
    sk_cost_kind: str = "cpu"  # cpu (computation) or sleep (blocking I/O)
    sk_cap: int = 10_000  # maxOffsetsPerTrigger
    # left out: the JVM compiles Spark's code (C2) for the first ~10 batches of 10,000 records; its
    # CPU per batch falls from 6.5 to 2.5 s over them, and Ballast's batch from 5.1 to 3.0 s
    sk_warmup_batches: int = 10
    sk_contenders: str = "ballast,ballast-2w,peer-1s,peer-4s,peer-8s,apply-1s,apply-4s,apply-8s"
    # drain: the sustainable rate, each contender draining the backlog at the cap; paced: latency
    # per record at a fixed rate, each contender fed live (bench.reduce.paced)
    sk_modes: str = "drain,paced"
    sk_paced_rate: float = 0.0  # events/s; 0: sk_paced_fraction x the best peer's drained rate (same seed)
    sk_paced_fraction: float = 0.8
    sk_paced_contenders: str = "ballast,ballast-routed,best"  # best: the best peer of the seed (drained)
    sk_paced_warm_s: float = 60.0  # records routed in the first seconds left out (start-up, JIT)
    sk_routing_interval_s: float = 5.0  # ballast-routed: the controller interval (theta, heavy_hitters above)
    # an earlier report of the part: its runs kept, this run's added (a contender's runs of a mode
    # that runs again are replaced); the backlogs must be the same
    sk_from: str = ""

    @property
    def trigger(self) -> str:
        """The trigger interval as Spark spells it."""
        return f"{self.trigger_ms} milliseconds"


QUICK = {
    "phases": 2,
    "slices": 4,
    "slice_records": 6_000,
    "prefix_records": 3_000,
    "record_cost_us": 1_500.0,
    "uniform_rounds": 1,
    "uniform_slices": 2,
    "uniform_slice_records": 5_000,
    "tp_events": 300_000,
    "tp_cap": 50_000,
    "tp_rounds": 1,
    "tp_warmup_batches": 1,
    "calm_s": 70.0,
    "calm_warm_s": 30.0,
    "soak_batches": 12,
    "soak_batch_records": 20_000,
    "soak_keys_per_batch": 10_000,
    "soak_batch_event_ms": 5_000,
    "soak_compare_batches": 3,
    "sk_events": 60_000,
    "sk_zipfs": "1.0",
    "sk_seeds": 1,
    "sk_warmup_batches": 1,
    "sk_paced_warm_s": 20.0,
}


def log(msg: str) -> None:
    print(f"[bench-reduce {time.strftime('%H:%M:%S')}] {msg}", flush=True)
