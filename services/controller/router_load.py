"""What the routers report, summed: per-worker records and the heavy hitters with their bound.

Why a reader of its own: the controller plans from the metrics topic, never from a router's
memory, so a plan can be reproduced from what was published (and routers restart freely).
Heavy-hitter counts are Misra-Gries *upper* estimates (``count`` never below the true count, at
most ``error`` above it), summed over intervals and routers.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from ballast.kafka.configuration import KafkaConfig
from ballast.metrics.reader import MetricsReader
from ballast.metrics.records import RouterKeyStats


@dataclass
class RouterLoad:
    """Load over some router statistics intervals: records per worker, heavy hitters by key."""

    per_worker: np.ndarray
    heavy_hitters: Counter[bytes] = field(default_factory=Counter)
    intervals: int = 0
    kept_records: int = 0  # records the intervals say were routed (after shedding)

    @classmethod
    def empty(cls, workers: int) -> RouterLoad:
        return cls(np.zeros(workers, dtype=np.float64))

    def add(self, stats: RouterKeyStats) -> None:
        """Fold one router's statistics interval."""
        workers = len(self.per_worker)
        counts = np.asarray(stats.worker_records[:workers], dtype=np.float64)
        self.per_worker[: len(counts)] += counts
        for hh in stats.heavy_hitters:
            self.heavy_hitters[hh.key.encode("utf-8")] += int(hh.count)
        self.intervals += 1
        self.kept_records += int(stats.kept_records)


def read_router_load(
    cfg: KafkaConfig,
    metrics_topic: str,
    workers: int,
    *,
    records: int = 0,
    since_ms: int = 0,
    timeout: float = 30.0,
) -> RouterLoad:
    """The RouterKeyStats intervals on ``metrics_topic`` that ended at or after ``since_ms``, summed.

    Reads the topic to its end as of the call; with ``records``, keeps reading until the intervals
    account for that many routed records (``kept_records``), a shortfall after ``timeout`` being an
    error. Routers publish an interval even when idle, so "until the topic goes quiet" would never
    end against a live deployment: the end offsets, and the records to cover, say when to stop.
    """
    load = RouterLoad.empty(workers)
    with MetricsReader(cfg, metrics_topic) as reader:
        reader.read_to_end(timeout)
        taken = 0

        def fold() -> int:
            nonlocal taken
            found = reader.of(RouterKeyStats)
            for metric, stats in found[taken:]:
                if metric.interval_end >= since_ms:
                    load.add(stats)
            taken = len(found)
            return load.kept_records

        fold()
        if records and load.kept_records < records:
            reader.wait_for(
                lambda _r: fold() >= records,
                timeout,
                f"router statistics on {metrics_topic} covering {records:,} records",
                describe=lambda: f"{load.kept_records:,} covered",
            )
    return load
