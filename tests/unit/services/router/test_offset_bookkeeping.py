"""The router's per-partition offset bookkeeping and its checkpoint, driven through the public API.

Why: a rebalance callback runs inside ``consume()``; records fetched before it can still arrive
in the batch, and after a re-assignment the same offsets are fetched again. The router must route
each offset once and commit only what it processed. The Kafka clients are the fakes of
tests/support/router_fakes.py, injected into the production ``Router``; the integration tests run
the same code against a real broker.
"""

from __future__ import annotations

import pytest
from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, TopicPartition

from ballast.control.state import make_event, routing_update
from services.router.checkpoint import Checkpoint
from services.router.errors import RouterError
from services.router.metrics import RouterMetrics
from tests.support.router_fakes import (
    RecordingProducer,
    ScriptedConsumer,
    make_router,
    msg,
    play,
    routed,
    routed_offsets,
)

pytestmark = pytest.mark.unit


def test_each_offset_routed_once_and_only_processed_offsets_committed():
    router = make_router(committed={("in", 0): 5})
    batch = [
        msg(0, 5), msg(0, 6),
        msg(1, 0),  # partition 1 is not ours (revoked during consume())
        msg(0, 5), msg(0, 6),  # the same offsets fetched again after a re-assignment
        msg(0, 7),
    ]  # fmt: skip
    play(router, ("assign", [("in", 0)]), ("batch", batch))
    assert routed_offsets(router) == [5, 6, 7]
    assert router.totals.offered == 3 and router.totals.refetched == 3
    assert router.consumer.commits[-1] == [("in", 0, 8)]  # type: ignore[attr-defined]
    assert router.totals.offset_resets == 0


def test_records_below_the_assigned_start_are_a_position_reset_not_a_refetch():
    """The group's committed offset (1000) is beyond the log end (e.g. the topic was recreated):
    the consumer resets to the earliest offset. Those records were never processed; dropping them
    as re-fetches would stall the partition until offset 1000."""
    router = make_router(committed={("in", 0): 1000})
    play(
        router, ("assign", [("in", 0)]), ("batch", [msg(0, 0), msg(0, 1)]), ("batch", [msg(0, 2), msg(0, 1)])
    )
    assert routed_offsets(router) == [0, 1, 2]
    assert router.totals.offset_resets == 1 and router.totals.refetched == 1
    assert router.consumer.commits[-1] == [("in", 0, 3)]  # type: ignore[attr-defined]


def test_revoked_partition_is_forgotten_and_not_committed():
    router = make_router(committed={("in", 0): 0})  # partition 2: assigned, nothing committed yet
    play(
        router,
        ("assign", [("in", 0), ("in", 2)]),
        ("batch", [msg(0, 0), msg(2, 10)]),
        ("revoke", [("in", 0)]),
        ("batch", [msg(0, 1)]),  # arrives after the revoke: not ours any more
    )
    commits = router.consumer.commits  # type: ignore[attr-defined]
    # at-least-once: the epoch is committed with the start offsets before the markers that rely
    # on it (partition 2 had no committed offset: it starts at the earliest, 0)
    assert commits[0] == [("in", 0, 0), ("in", 2, 0)]
    # the revoke commits what was processed while the partitions were still ours ...
    assert commits[1] == [("in", 0, 1), ("in", 2, 11)]
    # ... and afterwards only partition 2 is committed
    assert commits[-1] == [("in", 2, 11)]
    assert routed_offsets(router) == [0, 10]
    assert router.totals.refetched == 1


def test_large_source_offsets_are_encoded_like_avro():
    """The hot path builds the offset varint from a table plus cached high bits; fastavro must agree."""
    offsets = [8191, 8192, 16_383, 16_384, 2_097_151, 2_097_152, 123_456_789, 2**40]
    router = make_router(committed={("in", 0): offsets[0]})
    play(router, ("assign", [("in", 0)]), *(("batch", [msg(0, off)]) for off in offsets))
    assert routed_offsets(router) == offsets


def test_exactly_once_puts_markers_records_and_offsets_in_one_transaction():
    router = make_router(exactly_once=True, committed={("in", 0): 0})
    play(router, ("assign", [("in", 0)]), ("batch", [msg(0, 0), msg(0, 1)]))
    producer = router.producer
    assert producer.calls == ["begin", "send_offsets", "commit"]  # type: ignore[attr-defined]
    assert router.consumer.commits == [[("in", 0, 2)]]  # type: ignore[attr-defined]
    kinds = [(branch, b.get("worker", b.get("source_offset"))) for branch, b in routed(router)]
    # the restart marker of epoch 0 in every routed partition, before the records
    assert kinds == [("io.ballast.EpochMarker", w) for w in range(4)] + [
        ("io.ballast.DataRecord", 0),
        ("io.ballast.DataRecord", 1),
    ]
    assert router.totals.transactions == 1 and router.totals.markers == 4


def test_new_epoch_commits_first_then_markers_then_records_under_the_new_table():
    router = make_router(exactly_once=True, committed={("in", 0): 0})
    key = b"moved"
    home = router.state.table.route(key)
    event = make_event(1, *routing_update({"moved": (home + 1) % 4}))
    router.control.reader.events.append(event)  # type: ignore[attr-defined]
    router.consumer.script = [("assign", [("in", 0)]), ("batch", [msg(0, 0, key)])]  # type: ignore[attr-defined]
    router.start()
    router.step()  # the control poll before the batch applies epoch 1; its transaction opens with markers
    router.stop()
    router.run()
    data = [(b["epoch"], b["source_offset"]) for br, b in routed(router) if br == "io.ballast.DataRecord"]
    assert data == [(1, 0)]
    markers = [b["epoch"] for br, b in routed(router) if br == "io.ballast.EpochMarker"]
    assert markers == [1] * 4  # epoch 1 was applied before the first marker was owed
    assert [s.partition for s in router.producer.sent if s.key == key] == [(home + 1) % 4]  # type: ignore[attr-defined]
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


def test_checkpoint_assign_takes_committed_offsets_or_the_earliest_and_the_committed_epoch():
    cp, consumer, _ = _checkpoint({("in", 0): 7})
    consumer.group_metadata[("in", 0)] = "ballast-epoch=12"
    consumer.low_watermarks[("in", 1)] = 4  # no committed offset: starts at the earliest
    cp.on_assign(consumer, [TopicPartition("in", 0), TopicPartition("in", 1)])  # type: ignore[arg-type]
    assert cp.offsets == {("in", 0): 7, ("in", 1): 4} and cp.assigned == {("in", 0), ("in", 1)}
    assert cp.required_epoch == 12
    cp.epoch = 13
    assert [(tp.partition, tp.offset, tp.metadata) for tp in cp.positions()] == [
        (0, 7, "ballast-epoch=13"),
        (1, 4, "ballast-epoch=13"),
    ]
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
    assert cp.producer.calls == ["begin", "send_offsets", "commit:failed", "abort"]  # type: ignore[attr-defined]
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
