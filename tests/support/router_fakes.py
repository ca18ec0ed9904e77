"""Fake Kafka clients for driving the production :class:`~services.router.router.Router` without a
broker: a consumer that replays a script (rebalance callbacks run inside ``consume()``, as in
librdkafka), a producer that keeps transactions (what an aborted one sent never becomes visible;
a commit that timed out must be *resumed*, as librdkafka demands), and a static control log.

They model librdkafka's documented behaviour only as far as the router's unit tests need; the
integration tests run the same code against a real broker.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

from ballast.avro.codec import AvroCodec
from ballast.avro.wire import INPUT_HEADER, encode_input_body, zigzag
from ballast.control.state import ControlState, apply_event, initial_state
from ballast.kafka.topics import TopicLayout
from services.router.config import RouterSettings
from services.router.router import Router

LAYOUT = TopicLayout(prefix="t", workers=4)
ROUTED = LAYOUT.name("routed")
DEAD = LAYOUT.name("dead_letter")
ENVELOPE = AvroCodec("io.ballast.RoutedEnvelope")
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


class StaticControl:
    """A control log holding ``events`` to hand out on the next poll (folded like the real reader).

    ``lagging``: a non-blocking poll (timeout 0) sees nothing yet, as a reader whose fetch has not
    returned; only a blocking poll hands the events out."""

    def __init__(self, state: ControlState) -> None:
        self.topic = "t.control"
        self.state = state
        self.events: list[dict] = []
        self.lagging = False

    def read_to_end(self, timeout: float = 30.0) -> list[dict]:
        return []

    def poll(self, timeout: float = 0.0, max_events: int = 1000) -> list[dict]:
        if self.lagging and timeout <= 0:
            return []
        events, self.events = self.events, []
        for e in events:
            self.state = apply_event(self.state, e)
        return events

    def close(self) -> None:
        pass


def make_router(
    exactly_once: bool = False,
    committed: dict | None = None,
    metadata: dict | None = None,
    message_max_bytes: int | None = None,
    **settings: Any,
) -> Router:
    """The production router over the fakes; ``settings`` override :class:`RouterSettings` fields."""
    consumer = ScriptedConsumer(committed, metadata)
    base: dict[str, Any] = dict(
        router_id="r-test", exactly_once=exactly_once, stats_interval_s=3600, input_topics=("in",)
    )
    return Router(
        RouterSettings(**(base | settings)),
        LAYOUT,
        consumer=consumer,  # type: ignore[arg-type]
        producer=RecordingProducer(consumer, message_max_bytes),  # type: ignore[arg-type]
        control=StaticControl(initial_state(4)),
        routed_partitions=4,
    )


def msg(partition: int, offset: int, key: bytes | None = None) -> Message:
    key = key if key is not None else f"k{offset}".encode()
    value = INPUT_HEADER + encode_input_body(key, 1.0, offset.to_bytes(8, "big"), 1000 + offset)
    return Message(topic="in", partition=partition, offset=offset, key=key, value=value)


def play(router: Router, *script: tuple[str, Any]) -> None:
    """Run the router over ``script`` (one loop turn per entry), then stop it: final commit, close."""
    router.consumer.script = list(script)  # type: ignore[attr-defined]
    router.start()
    for _ in script:
        router.step()
    router.stop()
    router.run()


def routed(router: Router) -> list[tuple[str, dict]]:
    return [ENVELOPE.decode(s.value)["body"] for s in router.producer.sent if s.topic == ROUTED]  # type: ignore[attr-defined]


def routed_offsets(router: Router) -> list[int]:
    return [b["source_offset"] for branch, b in routed(router) if branch == "io.ballast.DataRecord"]


def routed_messages(router: Router) -> list[Message]:
    """What a read_committed reader of the routed topic would see, as messages (offsets per partition)."""
    next_offset: dict[int, int] = {}
    out = []
    for s in router.producer.sent:  # type: ignore[attr-defined]
        if s.topic != ROUTED:
            continue
        off = next_offset.get(s.partition, 0)
        next_offset[s.partition] = off + 1
        out.append(Message(topic=s.topic, partition=s.partition, offset=off, key=s.key, value=s.value))
    return out
