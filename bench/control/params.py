"""The benchmark's parameters, its fixed deployment shape, and its progress line.

Why one frozen dataclass: every field is a flag and goes into the report as it was, so a run can
be told apart from another by its JSON alone.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WORKERS = 8  # routed partitions
INPUT_PARTITIONS = 4  # so 4 routers own one input partition each
KEYS = 10_000  # input keys, uniform
APPEND_TIME = {"message.timestamp.type": "LogAppendTime"}
WAIT_S = 120.0  # longest wait for one event's markers, for the group to settle (a stuck run ends here)
TARGET_P99_MS = 100.0


@dataclass(frozen=True)
class Params:
    events: int = 500
    warmup: int = 10
    routers: tuple[int, ...] = (1, 4)
    loads: tuple[str, ...] = ("steady", "idle")
    rate: float = 4_000.0  # input records/s of the steady load, over all input partitions
    gap_min_ms: float = 20.0
    gap_max_ms: float = 80.0
    exactly_once: bool = True
    seed: int = 7


def log(msg: str) -> None:
    print(f"[bench-control {time.strftime('%H:%M:%S')}] {msg}", flush=True)
