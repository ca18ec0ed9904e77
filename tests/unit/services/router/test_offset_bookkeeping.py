"""The router's per-partition offset bookkeeping and its checkpoint, driven through the public API.

Why: a rebalance callback runs inside ``consume()``; records fetched before it can still arrive
in the batch, and after a re-assignment the same offsets are fetched again. The router must route
each offset once and commit only what it processed. The Kafka clients here are fakes injected into
the production ``Router``: a consumer that replays a script (rebalance callbacks inside
``consume()``, like librdkafka) and remembers commits, and a producer that records what it was
asked to send. The integration tests run the same code against a real broker.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, Message, TopicPartition

from ballast.avro.codec import AvroCodec
from ballast.avro.wire import INPUT_HEADER, encode_input_body
from ballast.control.state import ControlState, apply_event, initial_state, make_event, routing_update
from ballast.kafka.topics import TopicLayout
from services.router.checkpoint import Checkpoint
from services.router.config import RouterSettings
from services.router.errors import RouterError
from services.router.metrics import RouterMetrics
from services.router.router import Router

pytestmark = pytest.mark.unit

LAYOUT = TopicLayout(prefix="t", workers=4)
ROUTED = LAYOUT.name("routed")
ENVELOPE = AvroCodec("io.ballast.RoutedEnvelope")
NO_OFFSET = -1001  # librdkafka's OFFSET_INVALID: the group has no committed offset


class ScriptedConsumer:
    """Replays a script of ``("assign"|"revoke", [(topic, partition)])`` and ``("batch", [msgs])``."""

    def __init__(self, committed: dict[tuple[str, int], int] | None = None) -> None:
        self.group_offsets = dict(committed or {})  # what the group coordinator holds
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
        return [
            TopicPartition(
                tp.topic, tp.partition, self.group_offsets.get((tp.topic, tp.partition), NO_OFFSET)
            )
            for tp in partitions
        ]

    def commit(self, offsets: list[TopicPartition], asynchronous: bool = True) -> None:
        self.store(offsets)

    def store(self, offsets: list[TopicPartition]) -> None:
        self.commits.append(sorted((tp.topic, tp.partition, tp.offset) for tp in offsets))
        self.group_offsets.update({(tp.topic, tp.partition): tp.offset for tp in offsets})

    def assignment(self) -> list[TopicPartition]:
        return list(self.assigned)

    def seek(self, tp: TopicPartition) -> None:
        self.seeks.append((tp.topic, tp.partition, tp.offset))

    def consumer_group_metadata(self) -> str:
        return "group-metadata"

    def close(self) -> None:
        pass


class RecordingProducer:
    """Records produce() calls and transaction calls; a transaction's offsets reach the consumer's
    group on commit, as the broker does."""

    def __init__(self, consumer: ScriptedConsumer) -> None:
        self.consumer = consumer
        self.sent: list[tuple[str, bytes, bytes | None, int]] = []
        self.calls: list[str] = []
        self.txn_offsets: list[TopicPartition] = []
        self.fail_commit: list[KafkaException] = []

    def produce(self, topic, value=None, key=None, partition=-1, headers=None) -> None:
        self.sent.append((topic, value, key, partition))

    def poll(self, timeout: float = 0) -> int:
        return 0

    def flush(self, timeout: float = -1) -> int:
        return 0

    def begin_transaction(self) -> None:
        self.calls.append("begin")

    def send_offsets_to_transaction(self, positions, metadata, timeout=-1) -> None:
        assert metadata == "group-metadata"
        self.calls.append("send_offsets")
        self.txn_offsets = positions

    def commit_transaction(self, timeout: float = -1) -> None:
        if self.fail_commit:
            raise self.fail_commit.pop(0)
        self.calls.append("commit")
        self.consumer.store(self.txn_offsets)

    def abort_transaction(self, timeout: float = -1) -> None:
        self.calls.append("abort")


class StaticControl:
    """A control log holding ``events`` to hand out on the next poll (folded like the real reader)."""

    def __init__(self, state: ControlState) -> None:
        self.topic = "t.control"
        self.state = state
        self.events: list[dict] = []

    def read_to_end(self, timeout: float = 30.0) -> list[dict]:
        return []

    def poll(self, timeout: float = 0.0, max_events: int = 1000) -> list[dict]:
        events, self.events = self.events, []
        for e in events:
            self.state = apply_event(self.state, e)
        return events

    def close(self) -> None:
        pass


def _router(exactly_once: bool = False, committed: dict | None = None) -> Router:
    consumer = ScriptedConsumer(committed)
    return Router(
        RouterSettings(router_id="r-test", exactly_once=exactly_once, stats_interval_s=3600),
        LAYOUT,
        consumer=consumer,  # type: ignore[arg-type]
        producer=RecordingProducer(consumer),  # type: ignore[arg-type]
        control=StaticControl(initial_state(4)),
        routed_partitions=4,
    )


def _msg(partition: int, offset: int, key: bytes | None = None) -> Message:
    key = key if key is not None else f"k{offset}".encode()
    value = INPUT_HEADER + encode_input_body(key, 1.0, offset.to_bytes(8, "big"), 1000 + offset)
    return Message(topic="in", partition=partition, offset=offset, key=key, value=value)


def _play(router: Router, *script: tuple[str, Any]) -> None:
    """Run the router over ``script`` (one loop turn per entry), then stop it: final commit, close."""
    router.consumer.script = list(script)  # type: ignore[attr-defined]
    router.start()
    for _ in script:
        router.step()
    router.stop()
    router.run()


def _routed(router: Router) -> list[tuple[str, dict]]:
    return [ENVELOPE.decode(v)["body"] for t, v, _, _ in router.producer.sent if t == ROUTED]  # type: ignore[attr-defined]


def _routed_offsets(router: Router) -> list[int]:
    return [b["source_offset"] for branch, b in _routed(router) if branch == "io.ballast.DataRecord"]


def test_each_offset_routed_once_and_only_processed_offsets_committed():
    router = _router(committed={("in", 0): 5})
    batch = [
        _msg(0, 3), _msg(0, 4),  # below the committed offset: processed before
        _msg(0, 5), _msg(0, 6),
        _msg(1, 0),  # partition 1 is not ours (revoked during consume())
        _msg(0, 5), _msg(0, 6),  # the same offsets fetched again after a re-assignment
        _msg(0, 7),
    ]  # fmt: skip
    _play(router, ("assign", [("in", 0)]), ("batch", batch))
    assert _routed_offsets(router) == [5, 6, 7]
    assert router.totals.offered == 3 and router.totals.refetched == 5
    assert router.consumer.commits[-1] == [("in", 0, 8)]  # type: ignore[attr-defined]


def test_revoked_partition_is_forgotten_and_not_committed():
    router = _router(committed={("in", 0): 0})  # partition 2: assigned, nothing committed yet
    _play(
        router,
        ("assign", [("in", 0), ("in", 2)]),
        ("batch", [_msg(0, 0), _msg(2, 10)]),
        ("revoke", [("in", 0)]),
        ("batch", [_msg(0, 1)]),  # arrives after the revoke: not ours any more
    )
    commits = router.consumer.commits  # type: ignore[attr-defined]
    # the revoke commits what was processed while the partitions were still ours ...
    assert commits[0] == [("in", 0, 1), ("in", 2, 11)]
    # ... and afterwards only partition 2 is committed
    assert commits[-1] == [("in", 2, 11)]
    assert _routed_offsets(router) == [0, 10]
    assert router.totals.refetched == 1


def test_large_source_offsets_are_encoded_like_avro():
    """The hot path builds the offset varint from a table plus cached high bits; fastavro must agree."""
    offsets = [8191, 8192, 16_383, 16_384, 2_097_151, 2_097_152, 123_456_789, 2**40]
    router = _router(committed={("in", 0): offsets[0]})
    _play(router, ("assign", [("in", 0)]), *(("batch", [_msg(0, off)]) for off in offsets))
    assert _routed_offsets(router) == offsets


def test_exactly_once_puts_markers_records_and_offsets_in_one_transaction():
    router = _router(exactly_once=True, committed={("in", 0): 0})
    _play(router, ("assign", [("in", 0)]), ("batch", [_msg(0, 0), _msg(0, 1)]))
    producer = router.producer
    assert producer.calls == ["begin", "send_offsets", "commit"]  # type: ignore[attr-defined]
    assert router.consumer.commits == [[("in", 0, 2)]]  # type: ignore[attr-defined]
    kinds = [(branch, b.get("worker", b.get("source_offset"))) for branch, b in _routed(router)]
    # the restart marker of epoch 0 in every routed partition, before the records
    assert kinds == [("io.ballast.EpochMarker", w) for w in range(4)] + [
        ("io.ballast.DataRecord", 0),
        ("io.ballast.DataRecord", 1),
    ]
    assert router.totals.transactions == 1 and router.totals.markers == 4


def test_new_epoch_commits_first_then_markers_then_records_under_the_new_table():
    router = _router(exactly_once=True, committed={("in", 0): 0})
    key = b"moved"
    home = router.state.table.route(key)
    event = make_event(1, *routing_update({"moved": (home + 1) % 4}))
    router.control.reader.events.append(event)  # type: ignore[attr-defined]
    router.consumer.script = [("assign", [("in", 0)]), ("batch", [_msg(0, 0, key)])]  # type: ignore[attr-defined]
    router.start()
    router.step()  # the control poll before the batch applies epoch 1; its transaction opens with markers
    router.stop()
    router.run()
    data = [(b["epoch"], b["source_offset"]) for br, b in _routed(router) if br == "io.ballast.DataRecord"]
    assert data == [(1, 0)]
    markers = [b["epoch"] for br, b in _routed(router) if br == "io.ballast.EpochMarker"]
    assert markers == [0] * 4 + [1] * 4  # the restart marker, then the new epoch's
    assert [p for t, _, k, p in router.producer.sent if k == key] == [(home + 1) % 4]  # type: ignore[attr-defined]
    assert router.totals.epochs_applied == [1] and router.state.epoch == 1


# --- the checkpoint on its own --------------------------------------------------------------------


def _checkpoint(committed: dict, exactly_once: bool = True) -> tuple[Checkpoint, ScriptedConsumer, list]:
    consumer = ScriptedConsumer(committed)
    rewinds: list[int] = []
    cp = Checkpoint(
        consumer,  # type: ignore[arg-type]
        RecordingProducer(consumer),  # type: ignore[arg-type]
        RouterMetrics("r", 4),
        exactly_once=exactly_once,
        commit_interval_s=0.5,
        on_rewind=lambda: rewinds.append(1),
    )
    return cp, consumer, rewinds


def test_checkpoint_assign_takes_committed_offsets_and_commits_only_known_ones():
    cp, consumer, _ = _checkpoint({("in", 0): 7})
    cp.on_assign(consumer, [TopicPartition("in", 0), TopicPartition("in", 1)])  # type: ignore[arg-type]
    assert cp.offsets == {("in", 0): 7, ("in", 1): -1} and cp.assigned == {("in", 0), ("in", 1)}
    assert [(tp.partition, tp.offset) for tp in cp.positions()] == [(0, 7)]
    cp.offsets[("in", 1)] = 3  # the loop processed offset 2 of partition 1
    cp.on_lost(consumer, [TopicPartition("in", 0)])  # type: ignore[arg-type]
    assert [(tp.partition, tp.offset) for tp in cp.positions()] == [(1, 3)]


def test_checkpoint_abortable_commit_error_rewinds_to_the_committed_offsets():
    cp, consumer, rewinds = _checkpoint({("in", 0): 7})
    consumer.assigned = [TopicPartition("in", 0), TopicPartition("in", 1)]
    cp.on_assign(consumer, consumer.assigned)  # type: ignore[arg-type]
    cp.begin()
    cp.offsets[("in", 0)] = 20
    cp.offsets[("in", 1)] = 5
    abortable = KafkaException(KafkaError(KafkaError._FENCED, "fenced", txn_requires_abort=True))
    cp.producer.fail_commit.append(abortable)  # type: ignore[attr-defined]
    cp.commit()
    assert cp.producer.calls == ["begin", "send_offsets", "abort"]  # type: ignore[attr-defined]
    assert consumer.seeks == [("in", 0, 7), ("in", 1, OFFSET_BEGINNING)]
    assert cp.offsets == {("in", 0): 7, ("in", 1): -1}
    assert rewinds == [1] and not cp.in_txn and cp.metrics.totals.aborts == 1


def test_checkpoint_retries_a_retriable_commit_error_and_gives_up_on_a_fatal_one():
    cp, consumer, _ = _checkpoint({("in", 0): 0})
    cp.on_assign(consumer, [TopicPartition("in", 0)])  # type: ignore[arg-type]
    cp.begin()
    retriable = KafkaException(KafkaError(KafkaError._TIMED_OUT, "slow", retriable=True))
    cp.producer.fail_commit.append(retriable)  # type: ignore[attr-defined]
    cp.commit()
    assert cp.metrics.totals.transactions == 1 and not cp.in_txn
    cp.begin()
    cp.producer.fail_commit.append(KafkaException(KafkaError(KafkaError._FATAL, "no", fatal=True)))  # type: ignore[attr-defined]
    with pytest.raises(RouterError, match="transaction commit failed"):
        cp.commit()


def test_checkpoint_interval_is_due_only_when_open_and_old_enough():
    cp, _, _ = _checkpoint({}, exactly_once=False)
    assert not cp.due(1e12)
    cp.begin()
    assert not cp.due(cp.opened + 0.4) and cp.due(cp.opened + 0.5)
    cp.commit()
    assert not cp.due(1e12)
