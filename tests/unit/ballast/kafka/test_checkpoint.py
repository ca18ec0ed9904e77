"""The library's Checkpoint on its own, without the router: offsets, commits, aborts, rebalances.

Why on its own: the router and the controller both build on it, each with its own hooks; what the
checkpoint promises (what is committed, with which metadata, when; what an abort or a lost
partition rewinds) must hold whoever the hooks belong to. The Kafka clients are the fakes of
tests/support/kafka_fakes.py: a consumer whose group keeps committed offsets and metadata, a
producer whose transactions hide what an aborted one sent and answer a restarted commit with a
conflict, as librdkafka does.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, TopicPartition

from ballast.kafka import checkpoint
from ballast.kafka.checkpoint import Checkpoint, CheckpointError
from ballast.kafka.clients import DeliveryTracker
from tests.support.kafka_fakes import NO_OFFSET, RecordingProducer, ScriptedConsumer

pytestmark = pytest.mark.unit

SLOW = KafkaException(KafkaError(KafkaError._TIMED_OUT, "slow broker", retriable=True))
FENCED = KafkaException(KafkaError(KafkaError._FENCED, "fenced", txn_requires_abort=True))
FATAL = KafkaException(KafkaError(KafkaError._FATAL, "fatal", fatal=True))


class Counted:
    """A CheckpointMetrics that remembers what it was told, in order."""

    def __init__(self) -> None:
        self.events: list[Any] = []

    def committed(self, transaction: bool) -> None:
        self.events.append(("committed", transaction))

    def commit_retried(self) -> None:
        self.events.append("retried")

    def transaction_aborted(self) -> None:
        self.events.append("aborted")


class Kit:
    """A checkpoint over the fakes, with every hook recording its calls."""

    def __init__(
        self,
        committed: dict[tuple[str, int], int] | None = None,
        metadata: dict[tuple[str, int], str] | None = None,
        exactly_once: bool = True,
        **kw: Any,
    ) -> None:
        self.consumer = ScriptedConsumer(committed, metadata)
        self.producer = RecordingProducer(self.consumer)
        self.metrics = Counted()
        self.assigned: list[list[tuple[str, int, int, str | None]]] = []
        self.rewinds = 0
        self.before: list[list[str]] = []  # the producer's calls so far, each time before_commit ran
        self.version = 1
        self.cp = Checkpoint(
            self.consumer,  # type: ignore[arg-type]
            self.producer,  # type: ignore[arg-type]
            exactly_once=exactly_once,
            commit_interval_s=0.5,
            metrics=self.metrics,
            commit_metadata=lambda: f"v={self.version}",
            on_assigned=lambda tps: self.assigned.append(
                [(tp.topic, tp.partition, tp.offset, tp.metadata) for tp in tps]
            ),
            on_rewind=self._rewound,
            before_commit=lambda: self.before.append(list(self.producer.calls)),
            **kw,
        )

    def _rewound(self) -> None:
        self.rewinds += 1

    def assign(self, *partitions: int) -> None:
        self.cp.on_assign(self.consumer, [TopicPartition("in", p) for p in partitions])  # type: ignore[arg-type]

    def sent(self) -> list[bytes | None]:
        return [s.value for s in self.producer.sent]


def test_assignment_starts_at_the_committed_offsets_or_the_earliest_and_hands_over_what_was_committed():
    kit = Kit({("in", 0): 7}, {("in", 0): "v=12"})
    kit.consumer.low_watermarks[("in", 1)] = 4  # nothing committed: starts at the earliest offset
    kit.assign(0, 1)
    assert kit.cp.offsets == {("in", 0): 7, ("in", 1): 4}
    assert kit.cp.floors == {("in", 0): 7, ("in", 1): 4}
    assert kit.cp.assigned == {("in", 0), ("in", 1)}
    assert kit.assigned == [[("in", 0, 7, "v=12"), ("in", 1, NO_OFFSET, None)]]


def test_exactly_once_commits_the_offsets_and_their_metadata_in_the_transaction():
    kit = Kit({("in", 0): 0})
    kit.assign(0)
    kit.cp.begin()
    kit.cp.begin()  # an open interval stays the one transaction
    kit.producer.produce("out", b"r0")
    kit.cp.offsets[("in", 0)] = 5  # the loop processed offsets 0..4
    kit.version = 3
    assert kit.cp.is_open and kit.sent() == []  # not visible before the commit
    kit.cp.commit()
    assert kit.producer.calls == ["begin", "send_offsets", "commit"]
    assert kit.before == [["begin"]]  # the last writes go into the transaction, before its offsets
    assert kit.consumer.commits == [[("in", 0, 5)]]
    assert kit.consumer.group_metadata[("in", 0)] == "v=3"  # the metadata as of the commit
    assert kit.sent() == [b"r0"]
    assert kit.metrics.events == [("committed", True)]
    assert not kit.cp.is_open and not kit.cp.in_txn
    kit.cp.commit()  # nothing open: nothing to commit
    assert kit.producer.calls == ["begin", "send_offsets", "commit"]


def test_at_least_once_flushes_then_commits_the_offsets_with_their_metadata():
    kit = Kit({("in", 0): 0}, exactly_once=False)
    kit.assign(0)
    kit.cp.begin()
    kit.producer.produce("out", b"r0")
    kit.cp.offsets[("in", 0)] = 1
    kit.cp.commit()
    assert kit.producer.calls == []  # no transaction
    assert kit.consumer.commits == [[("in", 0, 1)]]
    assert kit.consumer.group_metadata[("in", 0)] == "v=1"
    assert kit.metrics.events == [("committed", False)]
    assert len(kit.before) == 1 and not kit.cp.is_open


def test_at_least_once_refuses_to_commit_past_a_failed_delivery():
    deliveries = DeliveryTracker()
    kit = Kit({("in", 0): 0}, exactly_once=False, deliveries=deliveries)
    kit.assign(0)
    kit.cp.begin()
    kit.cp.offsets[("in", 0)] = 1
    deliveries(KafkaError(KafkaError._MSG_TIMED_OUT), None)  # type: ignore[arg-type]
    with pytest.raises(CheckpointError, match="delivery failed"):
        kit.cp.commit()
    assert kit.consumer.commits == []


def test_a_commit_that_timed_out_is_resumed_not_restarted():
    """librdkafka: after a retriable ``commit_transaction`` error, call ``commit_transaction``
    again; a second ``send_offsets_to_transaction`` conflicts with the commit in progress."""
    kit = Kit({("in", 0): 0})
    kit.assign(0)
    kit.cp.begin()
    kit.producer.produce("out", b"r0")
    kit.cp.offsets[("in", 0)] = 9
    kit.producer.fail_commit += [SLOW, SLOW]
    kit.cp.commit()
    assert kit.producer.calls == ["begin", "send_offsets", "commit:failed", "commit:failed", "commit"]
    assert kit.consumer.group_offsets[("in", 0)] == 9 and kit.sent() == [b"r0"]
    assert kit.metrics.events == ["retried", "retried", ("committed", True)]
    assert len(kit.before) == 1  # the interval's last writes are written once, not per attempt
    assert not kit.cp.in_txn


@pytest.mark.parametrize("failures", [[FATAL], [SLOW, SLOW]], ids=["fatal", "attempts-used-up"])
def test_a_commit_that_cannot_succeed_raises_checkpoint_error(failures):
    kit = Kit({("in", 0): 0}, commit_attempts=2)
    kit.assign(0)
    kit.cp.begin()
    kit.producer.fail_commit += failures
    with pytest.raises(CheckpointError, match="transaction commit failed"):
        kit.cp.commit()
    assert ("committed", True) not in kit.metrics.events


def test_an_abortable_commit_error_aborts_and_rewinds_to_the_committed_offsets():
    kit = Kit({("in", 0): 7})
    kit.assign(0, 1)  # partition 1: nothing committed
    kit.cp.begin()
    kit.producer.produce("out", b"lost")
    kit.cp.offsets[("in", 0)] = 20
    kit.cp.offsets[("in", 1)] = 5
    kit.producer.fail_commit.append(FENCED)
    kit.cp.commit()
    assert kit.producer.calls == ["begin", "send_offsets", "commit:failed", "abort"]
    assert kit.consumer.seeks == [("in", 0, 7), ("in", 1, OFFSET_BEGINNING)]
    assert kit.cp.offsets == {("in", 0): 7, ("in", 1): -1}
    assert kit.cp.floors == {("in", 0): 7, ("in", 1): NO_OFFSET}
    assert kit.rewinds == 1 and kit.metrics.events == ["aborted"]
    assert kit.sent() == [] and kit.consumer.commits == []
    assert not kit.cp.in_txn and not kit.cp.is_open


def test_a_revoke_commits_while_the_partitions_are_owned_then_forgets_them():
    kit = Kit({("in", 0): 0, ("in", 1): 0})
    kit.assign(0, 1)
    kit.cp.begin()
    kit.cp.offsets[("in", 0)] = 3
    kit.cp.offsets[("in", 1)] = 9
    kit.cp.on_revoke(kit.consumer, [TopicPartition("in", 0)])  # type: ignore[arg-type]
    assert kit.consumer.commits == [[("in", 0, 3), ("in", 1, 9)]]
    assert kit.cp.offsets == {("in", 1): 9} and kit.cp.floors == {("in", 1): 0}
    assert kit.cp.assigned == {("in", 1)}
    kit.cp.begin()
    kit.cp.commit()
    assert kit.consumer.commits[-1] == [("in", 1, 9)]  # the revoked partition is not committed again


def test_lost_partitions_abort_and_rewind_the_partitions_still_owned():
    """Lost: this generation may not commit. The transaction also held what was processed of the
    partitions still owned, so they go back to their committed offsets."""
    kit = Kit({("in", 0): 2, ("in", 1): 5})
    kit.assign(0, 1)
    kit.cp.begin()
    kit.producer.produce("out", b"r")
    kit.cp.offsets[("in", 0)] = 10
    kit.cp.offsets[("in", 1)] = 20
    kit.cp.on_lost(kit.consumer, [TopicPartition("in", 0)])  # type: ignore[arg-type]
    assert kit.producer.calls == ["begin", "abort"]
    assert kit.consumer.seeks == [("in", 1, 5)]  # only the partition still owned
    assert kit.cp.offsets == {("in", 1): 5} and kit.cp.assigned == {("in", 1)}
    assert kit.rewinds == 1 and kit.metrics.events == ["aborted"]
    assert kit.sent() == [] and kit.consumer.commits == []


def test_lost_partitions_without_an_open_transaction_still_owe_a_rewind():
    kit = Kit({("in", 0): 2}, exactly_once=False)
    kit.assign(0)
    kit.cp.on_lost(kit.consumer, [TopicPartition("in", 0)])  # type: ignore[arg-type]
    assert kit.rewinds == 1 and kit.consumer.seeks == [] and kit.cp.offsets == {}
    assert kit.metrics.events == []


def test_an_interval_is_due_only_when_open_and_old_enough():
    kit = Kit({}, exactly_once=False)
    assert not kit.cp.due(1e12)
    kit.cp.begin()
    opened = kit.cp.opened
    kit.cp.begin()  # an open interval keeps its start
    assert kit.cp.opened == opened
    assert not kit.cp.due(opened + 0.4) and kit.cp.due(opened + 0.5)
    kit.cp.commit()
    assert not kit.cp.due(1e12)


def test_without_hooks_it_commits_plain_offsets():
    consumer = ScriptedConsumer({("in", 0): 0})
    cp = Checkpoint(consumer, RecordingProducer(consumer), exactly_once=True, commit_interval_s=1)  # type: ignore[arg-type]
    cp.on_assign(consumer, [TopicPartition("in", 0)])  # type: ignore[arg-type]
    cp.begin()
    cp.offsets[("in", 0)] = 4
    cp.commit()
    assert consumer.commits == [[("in", 0, 4)]] and consumer.group_metadata[("in", 0)] is None


class HangingProducer(RecordingProducer):
    """``send_offsets_to_transaction`` blocks until released, whatever its timeout: librdkafka's,
    when the group coordinator was killed (issues 5456, 5511)."""

    def __init__(self, consumer: ScriptedConsumer) -> None:
        super().__init__(consumer)
        self.release = threading.Event()

    def send_offsets_to_transaction(self, positions, metadata, timeout=-1) -> None:
        self.calls.append("send_offsets:hung")
        self.release.wait()


def test_a_call_that_never_returns_renews_the_producer_and_rewinds(monkeypatch):
    """Before: the commit waited for ever and the service routed nothing, saying nothing."""
    monkeypatch.setattr(checkpoint, "HANG_GRACE_S", 0.2, raising=False)
    renewed: list[RecordingProducer] = []

    def renew() -> RecordingProducer:
        renewed.append(RecordingProducer(kit.consumer))
        return renewed[-1]

    kit = Kit({("in", 0): 7}, renew_producer=renew, commit_timeout_s=0.1)
    hung = HangingProducer(kit.consumer)
    kit.cp.producer = hung  # type: ignore[assignment]
    kit.assign(0)
    kit.cp.begin()
    hung.produce("out", b"in the hung transaction")
    kit.cp.offsets[("in", 0)] = 20
    done = threading.Event()
    worker = threading.Thread(target=lambda: (kit.cp.commit(), done.set()), daemon=True)
    worker.start()
    worker.join(30)  # a liveness bound, far above the 0.3 s the checkpoint waits
    try:
        assert done.is_set(), "the commit is still waiting on the hung call"
        assert len(renewed) == 1 and kit.cp.producer is renewed[0]
        assert hung.calls == ["begin", "send_offsets:hung"]  # never closed or aborted under the call
        assert kit.consumer.seeks == [("in", 0, 7)] and kit.cp.offsets == {("in", 0): 7}
        assert kit.rewinds == 1 and kit.consumer.commits == [] and not kit.cp.in_txn
        kit.cp.begin()
        kit.cp.offsets[("in", 0)] = 9
        kit.cp.commit()  # the new producer commits
        assert renewed[0].calls == ["begin", "send_offsets", "commit"]
        assert kit.consumer.commits == [[("in", 0, 9)]]
    finally:
        hung.release.set()


def test_a_call_that_never_returns_without_a_renewal_fails_the_commit(monkeypatch):
    monkeypatch.setattr(checkpoint, "HANG_GRACE_S", 0.2, raising=False)
    kit = Kit({("in", 0): 7}, commit_timeout_s=0.1)
    hung = HangingProducer(kit.consumer)
    kit.cp.producer = hung  # type: ignore[assignment]
    kit.assign(0)
    kit.cp.begin()
    try:
        with pytest.raises(CheckpointError, match="did not return within"):
            kit.cp.commit()
    finally:
        hung.release.set()
