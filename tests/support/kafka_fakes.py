"""Fake Kafka clients for driving consume→produce code without a broker: a consumer that replays a
script (rebalance callbacks run inside ``consume()``, as in librdkafka) and a producer that keeps
transactions (what an aborted one sent never becomes visible; a commit that timed out must be
*resumed*, as librdkafka demands).

They model librdkafka's documented behaviour only as far as the unit tests of the library's
:class:`~ballast.kafka.checkpoint.Checkpoint` and of the router need; the integration tests run the
same code against a real broker.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

from ballast.avro.wire import zigzag

NO_OFFSET = -1001  # librdkafka's OFFSET_INVALID: the group has no committed offset


class ScriptedConsumer:
    """Replays a script of ``("assign"|"revoke", [(topic, partition)])`` and ``("batch", [msgs])``."""

    def __init__(
        self, committed: dict[tuple[str, int], int] | None = None, metadata: dict | None = None
    ) -> None:
        self.group_offsets = dict(committed or {})  # what the group coordinator holds
        self.group_metadata: dict[tuple[str, int], str] = dict(metadata or {})
        self.low_watermarks: dict[tuple[str, int], int] = {}
        self.script: list[tuple[str, Any]] = []
        self.commits: list[list[tuple[str, int, int]]] = []
        self.seeks: list[tuple[str, int, int]] = []
        self.callbacks: dict[str, Callable] = {}
        self.assigned: list[TopicPartition] = []
        self.topics: list[str] = []

    def subscribe(
        self, topics: list[str], on_assign: Callable, on_revoke: Callable, on_lost: Callable
    ) -> None:
        self.topics = topics
        self.callbacks = {"assign": on_assign, "revoke": on_revoke, "lost": on_lost}

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Message]:
        while self.script:
            what, arg = self.script.pop(0)
            if what == "batch":
                return arg
            parts = [TopicPartition(t, p) for t, p in arg]
            if what == "assign":
                self.assigned += parts
            else:
                self.assigned = [tp for tp in self.assigned if (tp.topic, tp.partition) not in arg]
            self.callbacks[what](self, parts)
        return []

    def committed(self, partitions: list[TopicPartition], timeout: float = -1) -> list[TopicPartition]:
        out = []
        for tp in partitions:
            key = (tp.topic, tp.partition)
            md = self.group_metadata.get(key)
            extra = {"metadata": md} if md is not None else {}
            out.append(
                TopicPartition(tp.topic, tp.partition, self.group_offsets.get(key, NO_OFFSET), **extra)
            )
        return out

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float = -1, cached: bool = False):
        low = self.low_watermarks.get((tp.topic, tp.partition), 0)
        return low, low + 1000

    def commit(self, offsets: list[TopicPartition], asynchronous: bool = True) -> None:
        self.store(offsets)

    def store(self, offsets: list[TopicPartition]) -> None:
        self.commits.append(sorted((tp.topic, tp.partition, tp.offset) for tp in offsets))
        self.group_offsets.update({(tp.topic, tp.partition): tp.offset for tp in offsets})
        self.group_metadata.update({(tp.topic, tp.partition): tp.metadata for tp in offsets})

    def assignment(self) -> list[TopicPartition]:
        return list(self.assigned)

    def seek(self, tp: TopicPartition) -> None:
        self.seeks.append((tp.topic, tp.partition, tp.offset))

    def consumer_group_metadata(self) -> str:
        return "group-metadata"

    def close(self) -> None:
        pass


LIBRDKAFKA_RECORD_OVERHEAD = 36  # what librdkafka 2.x adds to key + value + headers in its size check


class Sent(NamedTuple):
    topic: str
    value: bytes | None
    key: bytes | None
    partition: int
    headers: list[tuple[str, bytes]] | None


def headers_size(headers: list[tuple[str, bytes]] | None) -> int:
    """Kafka's record-header encoding: zigzag varint lengths and the bytes of each name and value."""
    return sum(
        len(zigzag(len(n.encode()))) + len(n.encode()) + len(zigzag(len(v))) + len(v)
        for n, v in headers or []
    )


class RecordingProducer:
    """Records produce() calls and transaction calls. Under a transaction, what is produced stays
    in :attr:`pending` until the commit (then it joins :attr:`sent`, and the transaction's offsets
    reach the consumer's group, as the broker does); an abort drops it. A ``commit_transaction``
    that failed with a retriable error is still in progress: librdkafka answers any other
    transactional call with a conflict until it is called again."""

    def __init__(self, consumer: ScriptedConsumer, message_max_bytes: int | None = None) -> None:
        """``message_max_bytes``: refuse larger records with MSG_SIZE_TOO_LARGE, as librdkafka does
        (and report the limit, as :class:`ballast.kafka.clients.ConfiguredProducer` does)."""
        if message_max_bytes is not None:
            self.message_max_bytes = message_max_bytes
        self.limit = message_max_bytes
        self.consumer = consumer
        self.sent: list[Sent] = []
        self.pending: list[Sent] = []
        self.in_txn = False
        self.calls: list[str] = []
        self.txn_offsets: list[TopicPartition] = []
        self.fail_commit: list[KafkaException] = []
        self.flushed = 0  # how many of :attr:`sent` had been produced when flush() was last called
        self._commit_in_progress = False

    def produce(self, topic, value=None, key=None, partition=-1, headers=None) -> None:
        if self.limit is not None:
            size = len(value or b"") + len(key or b"") + headers_size(headers) + LIBRDKAFKA_RECORD_OVERHEAD
            if size > self.limit:
                raise KafkaException(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE))
        (self.pending if self.in_txn else self.sent).append(Sent(topic, value, key, partition, headers))

    def poll(self, timeout: float = 0) -> int:
        return 0

    def flush(self, timeout: float = -1) -> int:
        self.flushed = len(self.sent)
        return 0

    def _not_while_committing(self, call: str) -> None:
        if self._commit_in_progress:
            self.calls.append(f"{call}:conflict")
            raise KafkaException(
                KafkaError(KafkaError._CONFLICT, "commit_transaction in progress", retriable=True)
            )

    def begin_transaction(self) -> None:
        self._not_while_committing("begin")
        self.calls.append("begin")
        self.in_txn = True

    def send_offsets_to_transaction(self, positions, metadata, timeout=-1) -> None:
        assert metadata == "group-metadata"
        self._not_while_committing("send_offsets")
        self.calls.append("send_offsets")
        self.txn_offsets = positions

    def commit_transaction(self, timeout: float = -1) -> None:
        if self.fail_commit:
            exc = self.fail_commit.pop(0)
            self._commit_in_progress = exc.args[0].retriable()
            self.calls.append("commit:failed")
            raise exc
        self._commit_in_progress = False
        self.calls.append("commit")
        self.consumer.store(self.txn_offsets)
        self.txn_offsets = []
        self.sent += self.pending
        self.pending = []
        self.in_txn = False

    def abort_transaction(self, timeout: float = -1) -> None:
        self._commit_in_progress = False
        self.calls.append("abort")
        self.pending = []
        self.txn_offsets = []
        self.in_txn = False
