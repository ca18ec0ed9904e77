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

from ballast.avro.codec import AvroCodec
from ballast.kafka.config import KafkaConfig
from ballast.kafka.reading import read_topic

ROUTER_KEY_STATS = "io.ballast.RouterKeyStats"


@dataclass
class RouterLoad:
    """Load over some router statistics intervals: records per worker, heavy hitters by key."""

    per_worker: np.ndarray
    heavy_hitters: Counter[bytes] = field(default_factory=Counter)
    intervals: int = 0

    @classmethod
    def empty(cls, workers: int) -> RouterLoad:
        return cls(np.zeros(workers, dtype=np.float64))

    def add(self, stats: dict) -> None:
        """Fold one decoded ``RouterKeyStats`` body."""
        workers = len(self.per_worker)
        counts = np.asarray(stats["worker_records"][:workers], dtype=np.float64)
        self.per_worker[: len(counts)] += counts
        for hh in stats["heavy_hitters"]:
            self.heavy_hitters[hh["key"].encode("utf-8")] += int(hh["count"])
        self.intervals += 1


def read_router_load(cfg: KafkaConfig, metrics_topic: str, workers: int, idle: float = 1.5) -> RouterLoad:
    """Sum every RouterKeyStats record on ``metrics_topic`` (read until it stays quiet ``idle`` s)."""
    codec = AvroCodec("io.ballast.MetricsRecord")
    load = RouterLoad.empty(workers)
    for m in read_topic(cfg, metrics_topic, idle=idle, timeout=30):
        branch, body = codec.decode(m.value(), m.topic(), m.partition(), m.offset())["body"]
        if branch == ROUTER_KEY_STATS:
            load.add(body)
    return load
