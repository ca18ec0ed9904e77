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
class ReduceSummary:
    """What the Spark stateful reduce wrote, checked against the events the demo produced.

    Ground truth is per key: with tumbling windows each record is in exactly one window, so the
    counts of a key's windows add up to its records and their sums to the sum of its values.
    """

    job: str
    processor: str
    watermark_delay: str
    trigger: str
    local_cores: int
    flush_key: str
    start_s: float = 0.0  # Spark session and query up
    drain_s: float = 0.0  # from the flush event routed to the output complete and the query quiet
    micro_batches: int = 0
    batch_ms_median: int = 0  # of the last 100 micro-batches at most (what Spark keeps)
    batch_ms_max: int = 0
    batches: list[list[int]] = field(default_factory=list)  # [batch id, rows read, ms] of those
    worker_steps: int = 0  # WorkerStats records on the metrics topic (micro-batches and timers)
    windows: int = 0  # distinct (key, window) results on the output topic
    rewritten_windows: int = 0  # results written again (at-least-once sink: same window, same key)
    split_windows: int = 0  # windows written by more than one worker
    keys_expected: int = 0
    keys_checked: int = 0  # keys of the input with at least one window
    count_mismatches: int = 0
    sum_mismatches: int = 0
    max_sum_error: float = 0.0  # largest relative difference of a key's sum
    unexpected_keys: int = 0  # keys on the output that the input never had
    late_records: int = 0
    dead_letters: dict[str, int] = field(default_factory=dict)  # the job's, by reason
    misplaced_steps: int = 0  # worker steps that ran outside their own Spark state partition
    pending_keys: int = 0  # keys still waiting for a state chunk in each worker's last step
    duplicate_chunks: int = 0
    held_records: int = 0  # records a new owner took in before the moved key's state arrived
    chunks_sent: int = 0
    chunks_installed: int = 0
    chunk_bytes: int = 0
    keys_moved: list[str] = field(default_factory=list)  # installed at a new worker, hottest first
    moves_expected: int = 0  # pinned keys whose hash home is another worker
    moves_missing: list[str] = field(default_factory=list)  # expected, never installed where pinned
    error: str | None = None  # the job failed or never completed its output
    spark_log: str | None = None  # what the Spark JVM printed, kept when the check failed

    @property
    def ok(self) -> bool:
        return (
            self.error is None
            and self.keys_checked == self.keys_expected > 0
            and self.count_mismatches == self.sum_mismatches == self.unexpected_keys == 0
            and self.split_windows == self.late_records == self.misplaced_steps == self.pending_keys == 0
            and not self.dead_letters
            and not self.moves_missing
        )


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
    flush_events: int = 0  # the far-future event that closes the reduce's windows (routed too)
    reduce: ReduceSummary | None = None  # None: --no-reduce
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
        reduce = ReduceSummary(**raw.pop("reduce")) if raw.get("reduce") else None
        raw.pop("reduce", None)
        load = {int(e): counts for e, counts in raw.pop("load_by_epoch").items()}
        return cls(plan=plan, reduce=reduce, load_by_epoch=load, **raw)

    @property
    def routing_ok(self) -> bool:
        """Every produced record routed exactly once, and records were routed under both epochs."""
        return self.missing == 0 and self.duplicated == 0 and len(self.load_by_epoch) >= 2

    @property
    def ok(self) -> bool:
        """The routing checks, and the reduce's (when it ran)."""
        return self.routing_ok and (self.reduce is None or self.reduce.ok)
