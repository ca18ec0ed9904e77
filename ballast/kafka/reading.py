"""Reading a topic back until it goes quiet: how tests, the demo and benchmarks check what landed.

Why one helper: "read until N records arrived, or until nothing came for a while" was written
four times, with different ideas of when to stop. :func:`read_until_idle` stops at the first of
``expected`` records, ``idle`` seconds without a record once ``min_records`` arrived, or
``timeout``; it raises on a consumer error instead of skipping it, and returns what it read, so
the caller asserts on count and content.
"""

from __future__ import annotations

import time

from confluent_kafka import Consumer, KafkaError, Message, TopicPartition

from ballast.kafka.admin import make_admin, partition_count
from ballast.kafka.clients import high_watermark, make_consumer
from ballast.kafka.configuration import KafkaConfig
from ballast.kafka.follow import ConsumerError
from ballast.kafka.identities import scratch_group

__all__ = ["ConsumerError", "offsets_at_time", "read_topic", "read_until_idle", "records_written"]


def read_until_idle(
    consumer: Consumer,
    expected: int | None = None,
    min_records: int = 0,
    idle: float | None = 3.0,
    timeout: float = 120.0,
    batch: int = 10_000,
) -> list[Message]:
    """Consume until ``expected`` records, ``idle`` quiet seconds after ``min_records``, or ``timeout``."""
    got: list[Message] = []
    deadline = time.monotonic() + timeout
    last_seen = time.monotonic()
    while time.monotonic() < deadline and (expected is None or len(got) < expected):
        msgs = consumer.consume(batch, timeout=0.5)
        for m in msgs:
            err = m.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    continue
                raise ConsumerError(f"consumer error: {err}")
            got.append(m)
        if msgs:
            last_seen = time.monotonic()
        elif idle is not None and len(got) >= min_records and time.monotonic() - last_seen > idle:
            break
    return got


def read_topic(
    cfg: KafkaConfig,
    topic: str,
    expected: int | None = None,
    min_records: int = 0,
    idle: float | None = 3.0,
    timeout: float = 120.0,
) -> list[Message]:
    """Every partition of ``topic`` from offset 0 (read_committed), read with :func:`read_until_idle`."""
    partitions = partition_count(make_admin(cfg), topic)
    consumer = make_consumer(cfg, scratch_group("reader"))
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        return read_until_idle(consumer, expected, min_records, idle, timeout)
    finally:
        consumer.close()


def records_written(cfg: KafkaConfig, topic: str, partitions: int) -> int:
    """Sum of the topic's end offsets: every record ever written to it (without compaction)."""
    consumer = make_consumer(cfg, scratch_group("offsets"))
    try:
        return sum(high_watermark(consumer, topic, p) for p in range(partitions))
    finally:
        consumer.close()


def offsets_at_time(
    cfg: KafkaConfig, topic: str, ms: int, purpose: str, timeout: float = 30.0
) -> dict[int, int]:
    """Per partition of ``topic``, the first offset at or after ``ms`` (a partition with nothing
    that recent: its end). Where a reader of days of records starts when it wants the newest."""
    probe = make_consumer(cfg, scratch_group(purpose))
    try:
        n = partition_count(make_admin(cfg), topic)
        found = probe.offsets_for_times([TopicPartition(topic, p, ms) for p in range(n)], timeout=timeout)
        return {
            tp.partition: tp.offset if tp.offset >= 0
            else probe.get_watermark_offsets(TopicPartition(topic, tp.partition), timeout=timeout)[1]
            for tp in found
        }  # fmt: skip
    finally:
        probe.close()
