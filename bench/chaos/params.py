"""The fault campaign's parameters: one frozen dataclass, the short run's overrides, the log line.

Why these defaults (each a flag of ``python -m bench.chaos``):

* ``workers`` 4, ``record_cost_us`` 4000: the reduce's per-record sleep makes its capacity a property
  of the job (4 workers × 1 / 4 ms = 1,000 records/s) rather than of the shared machine, so the
  burst (``rate`` × ``burst_factor`` = 1,500/s) is an overload whatever else runs, and the shedder
  must act; the calm rate (300/s) keeps a Python producer and three brokers within 2 cores;
* ``window`` 10 s, ``watermark_delay`` 10 s, ``correction_horizon`` 2 min: a record late by less
  than two minutes is still counted in a correction, so a lateness defect shows as dead letters
  *and* corrected rows, never as silently missing records;
* ``idle_timeout_s`` 30 s, ``router_session_timeout_ms`` 10 s, ``router_stop_s`` 15 s: the router is
  stopped for longer than its group's session (its partitions move to the other router) and for less
  than the reduce's idle-partition timeout (docs/chaos.md): no record may turn late because of it;
* ``reduce_stop_s`` 20 s, ``shedder_stop_after_s`` 15: the reduce is stopped for longer than the
  time after which the shedder declares it stopped (its only timeout a watcher sees);
* ``router_max_future_ms`` 5 s: the routers dead-letter records further ahead of their clock, so the
  30-minute-ahead producer's records end in the dead-letter topic;
* ``warmup_records`` 2,000: the reduce's first micro-batches with data open its state stores and
  start its Python workers (tens of seconds on 2 shared cores, one first batch took 80 s with three
  brokers starting up beside it); the campaign's clock and its faults start once the reduce has
  read the warm-up (its records are judged like any other);
* ``target_s`` 30 s: the shedder's lag target, and the line a fault's recovery is measured against.
  With 20 s the calm input already lagged 15 to 18 s on 2 shared cores with three brokers, and the
  shedder shed before the burst; the target must sit well above the lag while the pipeline keeps up.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"


@dataclass(frozen=True)
class Params:
    # the input
    input_s: float = 240.0  # seconds of streamed input
    rate: float = 300.0  # events/s outside the burst
    burst_factor: float = 5.0  # the burst's rate, times rate
    burst_s: float = 20.0
    shift_s: float = 60.0  # the Zipf hot set is drawn anew this often
    keys: int = 2_000
    zipf: float = 1.0
    warmup_records: int = 2_000  # before the clock starts: the reduce's first batches start its workers
    # the deployment
    workers: int = 4
    input_partitions: int = 4
    routers: int = 2
    record_cost_us: float = 4000.0
    window: str = "10s"
    watermark_delay: str = "10 seconds"
    correction_horizon: str = "2 minutes"
    # the judge's grace around a window when it asks whether a shed was in force (records are routed
    # a little after their event time): a window with no row counts as shed only then
    shed_margin: str = "10 seconds"
    trigger: str = "2 seconds"
    idle_timeout_s: float = 30.0  # the reduce's --idle-timeout
    router_max_future_ms: int = 5_000  # the routers' --max-future-ms
    router_session_timeout_ms: int = 10_000
    controller_interval_s: float = 5.0
    theta: float = 0.3
    target_s: float = 30.0
    min_accuracy: float = 0.3
    cycle_s: float = 5.0
    shedder_stop_after_s: float = 15.0
    # the faults
    first_fault_s: float = 20.0  # no fault before this much input (the pipeline's first steady state)
    quiet_tail_s: float = 30.0  # no fault starts in the input's last seconds
    min_gap_s: float = 12.0  # between two faults' starts
    kill_down_s: float = 5.0  # a killed service stays down this long (broker: broker_down_s)
    broker_down_s: float = 20.0
    router_stop_s: float = 15.0
    reduce_stop_s: float = 20.0
    skew_ahead_s: float = 1800.0  # the producer whose clock is 30 minutes ahead
    skew_s: float = 5.0
    skew_rate: float = 20.0
    junk_input: int = 20
    junk_control: int = 3
    skip: str = ""  # fault kinds left out of the plan, comma-separated (to tell one defect from another)
    # the run
    drain_timeout_s: float = 240.0  # after the input, for the last windows to close
    ready_timeout_s: float = 300.0
    max_restarts: int = 3  # a service that exits on its own is restarted at most this often
    status_s: float = 5.0  # a progress line this often


SHORT = {
    "input_s": 140.0,
    "shift_s": 45.0,
    "burst_s": 15.0,
    "first_fault_s": 15.0,
    "quiet_tail_s": 20.0,
    "min_gap_s": 8.0,
    "broker_down_s": 15.0,
    "drain_timeout_s": 180.0,
}


def log(msg: str) -> None:
    print(f"[chaos {time.strftime('%H:%M:%S')}] {msg}", flush=True)
