"""What the routers report, summed: per-worker records and the heavy hitters with their bound.

Why a reader of its own: the controller plans from the metrics topic, never from a router's
memory, so a plan can be reproduced from what was published (and routers restart freely).
Heavy-hitter counts are Misra-Gries *upper* estimates (``count`` never below the true count, at
most ``error`` above it), summed over intervals and routers.
"""

from __future__ import annotations

import uuid
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
from confluent_kafka import TopicPartition

from ballast.avro.codec import AvroCodec
from ballast.kafka.admin import make_admin, partition_count
from ballast.kafka.clients import make_consumer
from ballast.kafka.config import KafkaConfig
from ballast.kafka.reading import read_topic, read_until_idle
from ballast.waiting import wait_until

ROUTER_KEY_STATS = "io.ballast.RouterKeyStats"


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

    def add(self, stats: dict) -> None:
        """Fold one decoded ``RouterKeyStats`` body."""
        workers = len(self.per_worker)
        counts = np.asarray(stats["worker_records"][:workers], dtype=np.float64)
        self.per_worker[: len(counts)] += counts
        for hh in stats["heavy_hitters"]:
            self.heavy_hitters[hh["key"].encode("utf-8")] += int(hh["count"])
        self.intervals += 1
        self.kept_records += int(stats["kept_records"])


def read_router_load(
    cfg: KafkaConfig,
    metrics_topic: str,
    workers: int,
    idle: float = 1.5,
    *,
    records: int | None = None,
    timeout: float = 30.0,
) -> RouterLoad:
    """Sum every RouterKeyStats record on ``metrics_topic``.

    Without ``records``: read until the topic stays quiet ``idle`` s. Routers publish one record per
    statistics interval even when idle, so against routers publishing more often than ``idle`` the
    topic never goes quiet and the read lasts ``timeout``. A caller that knows how many records
    were routed passes ``records`` instead: the read stops once the intervals read account for
    that many (``kept_records``), and a shortfall after ``timeout`` is an error.
    """
    codec = AvroCodec("io.ballast.MetricsRecord")
    load = RouterLoad.empty(workers)

    def fold(messages: list) -> None:
        for m in messages:
            branch, body = codec.decode(m.value(), m.topic(), m.partition(), m.offset())["body"]
            if branch == ROUTER_KEY_STATS:
                load.add(body)

    if records is None:
        fold(read_topic(cfg, metrics_topic, idle=idle, timeout=timeout))
        return load
    partitions = partition_count(make_admin(cfg), metrics_topic)
    consumer = make_consumer(cfg, f"ballast-router-load-{uuid.uuid4().hex[:8]}")
    try:
        consumer.assign([TopicPartition(metrics_topic, p, 0) for p in range(partitions)])

        def covered() -> bool:
            fold(read_until_idle(consumer, idle=None, timeout=0.5))
            return load.kept_records >= records

        wait_until(
            covered,
            timeout,
            f"router statistics on {metrics_topic} covering {records:,} records",
            interval=0,
            describe=lambda: f"{load.kept_records:,} covered",
        )
    finally:
        consumer.close()
    return load
