"""The scaling benchmark's parameters, its fixed deployment shape, and its log line.

Why these defaults (measured by tests/e2e/test_scaling.py on this machine):

* ``record_cost_us`` 4 ms of *sleep* per row at the reduce's stateful step: it stands for blocking
  I/O (a lookup, a model call), so a batch's worker tasks wait side by side and more hashed workers
  add capacity on 2 cores; a CPU cost could not show scaling on this machine;
* ``trigger_s`` 20 s: a batch here costs ~3.3 s whatever its rows, so with a short trigger the
  fixed cost would be most of what DS2's batch model sees; at 20 s one worker carries ~210 rows/s
  with each batch inside the trigger (the e2e measured 218);
* ``unit_rate`` 200/s: one instance's capacity, the "1×" of the steps 1× → 2× → 4× → 1×;
* ``step_s`` 180 s: DS2 needs its batch model (5 batches of 20 s) and two estimates per change;
* the shedder's cycle equals the trigger (docs/shedder.md: a shorter one reads a batch's saw-tooth
  as a rising lag), its target 60 s (above the ~35 s a 20 s trigger gives when keeping up).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WORKERS = 8  # routed partitions: the most hashed workers; local cores of the Spark
INPUT_PARTITIONS = 4
POLICIES = ("ds2", "busy-time", "fixed-max")
WAIT_S = 600.0
STATUS_S = 15.0


@dataclass(frozen=True)
class Params:
    policies: str = ",".join(POLICIES)
    keys: int = 300
    record_cost_us: float = 4000.0
    trigger_s: float = 20.0
    unit_rate: float = 200.0  # one instance's capacity: the steps' 1×
    steps: str = "1,2,4,1"  # the input, times unit_rate, one step after the other
    step_s: float = 180.0
    window_ms: int = 10_000
    watermark_delay: str = "10 seconds"
    scaling_interval_s: float = 10.0
    scaling_warmup: int = 1
    scaling_activation: int = 2
    scale_down_delay_s: float = 60.0
    target_s: float = 60.0  # the stream's latency target
    min_accuracy: float = 0.2
    scaling_hold_s: float = 20.0  # the shedder decides nothing this long after a scaling action
    sample_s: float = 2.0
    seed: int = 31


QUICK = {"step_s": 90.0, "scale_down_delay_s": 30.0}


def log(msg: str) -> None:
    print(f"[bench-scaling {time.strftime('%H:%M:%S')}] {msg}", flush=True)
