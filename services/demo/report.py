"""What a demo run found, as data: the renderer prints it and the end-to-end test asserts on it."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class PlanSummary:
    """The routing update the demo appended to the control log."""

    epoch: int
    pinned_keys: int
    heavy_hitters: int
    plan_time_ms: float
    predicted_max_mean: float
    feasible: bool


@dataclass
class DemoReport:
    """Ground truth checks and per-worker loads of one demo run."""

    bootstrap: str
    routed_topic: str
    workers: int
    produced: int
    plan: PlanSummary | None = None
    # records per worker, by the epoch they were routed under (read back from the routed topic)
    load_by_epoch: dict[int, list[int]] = field(default_factory=dict)
    routed: int = 0
    markers: int = 0
    transactions: int = 0
    dead_lettered: int = 0
    missing: int = 0
    duplicated: int = 0
    started_stack: bool = False
    stack_dir: str | None = None

    def max_mean(self, epoch: int) -> float:
        """Per-worker load imbalance under ``epoch`` (max / mean; 1.0 is perfect balance)."""
        counts = np.asarray(self.load_by_epoch.get(epoch, []), dtype=np.float64)
        return float(counts.max() / counts.mean()) if counts.size and counts.sum() else float("nan")

    def write_json(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(asdict(self), indent=2))

    @classmethod
    def read_json(cls, path: str | Path) -> DemoReport:
        raw = json.loads(Path(path).read_text())
        plan = PlanSummary(**raw.pop("plan")) if raw.get("plan") else None
        raw.pop("plan", None)
        load = {int(e): counts for e, counts in raw.pop("load_by_epoch").items()}
        return cls(plan=plan, load_by_epoch=load, **raw)

    @property
    def ok(self) -> bool:
        """Every produced record routed exactly once, and records were routed under both epochs."""
        return self.missing == 0 and self.duplicated == 0 and len(self.load_by_epoch) >= 2
