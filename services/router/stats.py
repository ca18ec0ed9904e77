"""Per-interval key statistics of one router, rendered as a ``RouterKeyStats`` metrics record.

Why offered *and* kept: shed records never reach a worker, so a balancer that only saw routed
counts would read shedding as low load and undo it; the record carries both.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from services.router.heavy_hitters import HeavyHitters


class IntervalStats:
    """Counts for the current interval; ``snapshot`` renders them and starts a new interval."""

    def __init__(self, partitions: int, capacity: int, top_k: int, now_ms: int) -> None:
        self.partitions = partitions
        self.top_k = top_k
        self.sketch = HeavyHitters(capacity)
        self.start_ms = now_ms
        self.worker_records = [0] * partitions
        self.worker_bytes = [0] * partitions
        self.offered = 0
        self.kept = 0
        self.dead_lettered = 0

    def _reset(self) -> None:
        self.worker_records = [0] * self.partitions
        self.worker_bytes = [0] * self.partitions
        self.offered = 0
        self.kept = 0
        self.dead_lettered = 0
        self.sketch.reset()

    def add_batch(
        self,
        worker_records: list[int],
        worker_bytes: list[int],
        keys: list[bytes],
        offered: int,
        kept: int,
        dead: int,
    ) -> None:
        for i, (n, b) in enumerate(zip(worker_records, worker_bytes, strict=True)):
            self.worker_records[i] += n
            self.worker_bytes[i] += b
        self.offered += offered
        self.kept += kept
        self.dead_lettered += dead
        if keys:
            self.sketch.update(Counter(keys))

    def snapshot(self, source: str, epoch: int, now_ms: int) -> dict[str, Any]:
        """A MetricsRecord dict (codec tuple notation) for the interval ending now; then reset."""
        hh = [
            {"key": k.decode("utf-8", "replace") if isinstance(k, bytes) else str(k), "count": c, "error": e}
            for k, c, e in self.sketch.top(self.top_k)
        ]
        record = {
            "source": source,
            "interval_start": self.start_ms,
            "interval_end": now_ms,
            "body": (
                "io.ballast.RouterKeyStats",
                {
                    "epoch": epoch,
                    "worker_records": list(self.worker_records),
                    "worker_bytes": list(self.worker_bytes),
                    "offered_records": self.offered,
                    "kept_records": self.kept,
                    "dead_lettered": self.dead_lettered,
                    "heavy_hitters": hh,
                    "sketch_capacity": self.sketch.capacity,
                },
            ),
        }
        self.start_ms = now_ms
        self._reset()
        return record
