"""Kafka client factories and small I/O helpers shared by services, tests and benchmarks.

Why: every producer Ballast ships must use the same settings (murmur2 partitioner, idempotence,
acks=all) and every consumer the same isolation level; building them from one
:class:`~ballast.kafka.config.KafkaConfig` keeps that true by construction.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from ballast.kafka.configuration import LIBRDKAFKA_MESSAGE_MAX_BYTES, KafkaConfig


class DeliveryError(RuntimeError):
    """The broker rejected a record, or delivery did not finish in time."""


class ConfiguredProducer(Producer):
    """A :class:`~confluent_kafka.Producer` that can say the ``message.max.bytes`` it was built with.

    librdkafka has no getter for its configuration, and its ``produce()`` raises
    MSG_SIZE_TOO_LARGE for a larger record: a service that must never hit that (the router sizes
    what it writes against it) reads the limit here instead of assuming the default.
    """

    def __init__(self, conf: dict[str, Any]) -> None:
        super().__init__(conf)
        self.message_max_bytes = int(conf.get("message.max.bytes", LIBRDKAFKA_MESSAGE_MAX_BYTES))


def make_producer(cfg: KafkaConfig, **extra: Any) -> ConfiguredProducer:
    return ConfiguredProducer(cfg.producer(**extra))


def make_consumer(cfg: KafkaConfig, group_id: str, **extra: Any) -> Consumer:
    return Consumer(cfg.consumer(group_id, **extra))


class DeliveryTracker:
    """Counts acknowledgements and remembers the first failure, for ``produce(on_delivery=...)``."""

    def __init__(self) -> None:
        self.delivered = 0
        self.failed = 0
        self.first_error: KafkaError | None = None

    def __call__(self, err: KafkaError | None, msg: Message) -> None:
        if err is None:
            self.delivered += 1
        else:
            self.failed += 1
            self.first_error = self.first_error or err

    def raise_if_failed(self) -> None:
        if self.failed:
            raise DeliveryError(f"{self.failed} records not delivered; first error: {self.first_error}")


def produce_waiting(
    producer: Producer,
    topic: str,
    value: bytes,
    key: bytes | None = None,
    on_delivery: Callable[..., None] | None = None,
    partition: int | None = None,
) -> None:
    """Produce one record (to ``partition``, or where the key hashes), waiting while the local queue
    is full instead of failing.

    Why: ``produce`` raises ``BufferError`` at once when librdkafka's queue is full; serving
    delivery reports (``poll``) is what empties it, so a loader that produces faster than the
    broker takes must poll and try again, not drop the record.
    """
    extra: dict = {} if partition is None else {"partition": partition}
    if on_delivery is not None:
        extra["on_delivery"] = on_delivery
    while True:
        try:
            producer.produce(topic, value, key, **extra)
            return
        except BufferError:
            producer.poll(0.05)


def produce_all(
    producer: Producer,
    topic: str,
    records: Iterator[tuple[bytes | None, bytes]],
    flush_timeout: float = 120.0,
    on_progress: Callable[[int], None] | None = None,
) -> int:
    """Produce (key, value) pairs, waiting on a full local queue instead of failing; raise on loss."""
    tracker = DeliveryTracker()
    sent = 0
    for key, value in records:
        produce_waiting(producer, topic, value, key, tracker)
        sent += 1
        if sent % 10_000 == 0:
            producer.poll(0)
            if on_progress:
                on_progress(sent)
    remaining = producer.flush(flush_timeout)
    if remaining:
        raise DeliveryError(f"{remaining} records still queued after {flush_timeout}s")
    tracker.raise_if_failed()
    return sent


# errors a partition's offsets are asked again for: its leader moved (a broker failed over) or is
# not known yet; the client's metadata catches up within seconds. OFFSET_NOT_AVAILABLE is a new
# leader whose high watermark has not caught up yet (KIP-207); _UNKNOWN_PARTITION is librdkafka's
# word for a partition its metadata does not hold yet (a topic made moments ago). librdkafka marks
# neither retriable.
_LEADER_SETTLING = frozenset({
    KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE, KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError._UNKNOWN_PARTITION, KafkaError._TRANSPORT, KafkaError._TIMED_OUT, KafkaError.REQUEST_TIMED_OUT,
    KafkaError.FENCED_LEADER_EPOCH, KafkaError.UNKNOWN_LEADER_EPOCH, KafkaError.OFFSET_NOT_AVAILABLE,
})  # fmt: skip


def leader_settling(err: KafkaError) -> bool:
    """Whether a partition's offsets failed only because its leadership is settling: ask again."""
    return err.retriable() or err.code() in _LEADER_SETTLING


def high_watermark(consumer: Consumer, topic: str, partition: int, timeout_s: float = 60.0) -> int:
    """The partition's high watermark, asked again while its leader moves (a broker failover made
    a one-shot ask fail with NOT_LEADER_FOR_PARTITION), up to ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            tp = TopicPartition(topic, partition)
            return consumer.get_watermark_offsets(tp, timeout=10, cached=False)[1]
        except KafkaException as exc:
            err = exc.args[0]
            if not leader_settling(err) or time.monotonic() >= deadline:
                raise
            time.sleep(0.5)
