"""The migration benchmark's parameters, its fixed deployment shape, and its log line.

Why one frozen dataclass (as in :mod:`bench.reduce.params`): every field is a flag
(``--stale-pins``), the report records them all, and ``--quick`` is a set of overrides of the same
fields.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WORKERS = 8  # routed partitions = reduce workers = Spark state partitions = local cores of the Spark
INPUT_PARTITIONS = 4
MODES = ("all-at-once", "batched", "fluid")
WAIT_S = 600.0  # no single wait may take longer (a stuck run ends here)
STATUS_S = 10.0  # a progress line at least this often while a run waits


@dataclass(frozen=True)
class Params:
    modes: str = ",".join(MODES)  # which pacing modes run, in this order
    keys: int = 10_000
    z: float = 1.0
    rate: int = 1_000  # input events per second, produced at a steady pace
    per_ms: int = 1  # events per ms of event time (rate / per_ms = event-time ms per wall second)
    stale_pins: int = 22  # keys the table pins for an earlier hot set (handed back by the rebalance)
    step_keys: int = 8  # B of the batched mode
    steady_s: float = 50.0  # input before the rebalance request (the steady state it is measured against)
    settle_s: float = 15.0  # the first seconds of input are not steady state (first batches, JIT)
    tail_s: float = 15.0  # input after the migration's DONE (the state it leaves)
    max_input_s: float = 600.0  # input generated for at most this long (the longest run's bound)
    processor: str = "aggregate:size=10s"
    window_ms: int = 10_000
    watermark_delay: str = "10 seconds"
    trigger: str = "1 second"
    record_cost_us: float = 0.0  # the job's per-record sleep (0: the processor's own cost only)
    heavy_hitters: int = 64  # tracked keys per router statistics interval (the planner's movable keys)
    stats_interval_s: float = 1.0  # router statistics interval
    interval_s: float = 5.0  # controller load interval (the rebalance plans from the last one)
    plan_theta: float = 0.08
    step_timeout_s: float = 60.0
    seed: int = 11


QUICK = {
    "stale_pins": 8,
    "steady_s": 30.0,
    "settle_s": 10.0,
    "tail_s": 10.0,
    "max_input_s": 300.0,
}


def log(msg: str) -> None:
    print(f"[bench-migration {time.strftime('%H:%M:%S')}] {msg}", flush=True)
