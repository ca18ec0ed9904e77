"""The router's per-partition offset bookkeeping over its checkpoint, driven through the public API.

Why: a rebalance callback runs inside ``consume()``; records fetched before it can still arrive
in the batch, and after a re-assignment the same offsets are fetched again. The router must route
each offset once and commit only what it processed. The Kafka clients are the fakes of
tests/support/kafka_fakes.py, injected into the production ``Router`` (tests/support/router_fakes.py);
the integration tests run the same code against a real broker. The library's ``Checkpoint`` has its
own tests (tests/unit/ballast/kafka/test_checkpoint.py); these check what the router hands it.
"""

from __future__ import annotations

import pytest
from confluent_kafka import TopicPartition

from ballast.control.state import make_event, routing_update
from tests.support.router_fakes import make_router, msg, play, routed, routed_offsets

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


# --- what the router hands the checkpoint ----------------------------------------------------------


def test_assigned_partitions_require_the_highest_epoch_their_previous_owners_committed():
    router = make_router(
        exactly_once=True,
        committed={("in", 0): 7, ("in", 1): 3, ("in", 2): 1},
        metadata={("in", 0): "ballast-epoch=12", ("in", 1): "ballast-epoch=3", ("in", 2): "foreign"},
    )
    router.start()
    router.checkpoint.on_assign(router.consumer, [TopicPartition("in", p) for p in range(3)])
    assert router.required_epoch == 12
    router.checkpoint.on_assign(router.consumer, [TopicPartition("in", 3)])  # nothing committed
    assert router.required_epoch == 12  # a later assignment never lowers it
    assert router.checkpoint.offsets == {("in", 0): 7, ("in", 1): 3, ("in", 2): 1, ("in", 3): 0}
    assert router.envelopes.markers_due  # the new partitions are owed a marker


def test_the_checkpoint_commits_the_epoch_the_router_routes_under():
    router = make_router(exactly_once=False, committed={("in", 0): 7})
    router.checkpoint.on_assign(router.consumer, [TopicPartition("in", 0)])
    assert [(tp.offset, tp.metadata) for tp in router.checkpoint.positions()] == [(7, "ballast-epoch=0")]
    router.control.reader.events.append(make_event(1, *routing_update({"k": 2})))  # type: ignore[attr-defined]
    router.start()
    router.step()  # the control poll applies epoch 1
    assert [(tp.offset, tp.metadata) for tp in router.checkpoint.positions()] == [(7, "ballast-epoch=1")]
