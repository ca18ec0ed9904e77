"""The router's half of the frontier rule, on fake clients: markers cover input partitions,
epochs travel with committed offsets, every abort path owes a marker again, and a commit that
timed out is resumed. Every test reads the output as a ``read_committed`` consumer would (aborted
transactions dropped) and judges it with the schema-level checker of tests/support/frontier.py.
"""

from __future__ import annotations

import os

import pytest
from confluent_kafka import KafkaError, KafkaException

from ballast.control.state import make_event, routing_update
from services.router import epochs
from services.router.config import RouterSettings
from tests.support import frontier
from tests.support.router_fakes import (
    make_router,
    msg,
    play,
    routed,
    routed_messages,
)

pytestmark = pytest.mark.unit

INPUTS = {("in", p) for p in range(4)}


def check(router) -> frontier.RoutedTopic:
    topic = frontier.from_messages(routed_messages(router))
    assert frontier.violations(topic, INPUTS) == []
    return topic


def markers(router) -> list[tuple[int, list[tuple[str, int]]]]:
    return [
        (b["epoch"], [(c["topic"], c["partition"]) for c in b["covers"]])
        for br, b in routed(router)
        if br == "io.ballast.EpochMarker"
    ]


def test_markers_cover_the_input_partitions_owned_and_precede_their_records():
    router = make_router(exactly_once=True, committed={("in", 0): 0, ("in", 3): 7})
    play(router, ("assign", [("in", 0), ("in", 3)]), ("batch", [msg(0, 0), msg(3, 7)]))
    assert markers(router) == [(0, [("in", 0), ("in", 3)])] * 4
    check(router)


def test_every_assignment_owes_a_marker_covering_the_new_partitions():
    router = make_router(exactly_once=True, committed={("in", 0): 0, ("in", 1): 0})
    play(
        router,
        ("assign", [("in", 0)]),
        ("batch", [msg(0, 0)]),
        ("revoke", [("in", 0)]),
        ("assign", [("in", 0), ("in", 1)]),
        ("batch", [msg(0, 1), msg(1, 0)]),
    )
    assert markers(router) == [(0, [("in", 0)])] * 4 + [(0, [("in", 0), ("in", 1)])] * 4
    check(router)


def test_a_partition_is_never_routed_under_an_older_epoch_than_its_previous_owner_committed():
    """Router A applied epoch 1 and committed partition 0 with it; this router (B) takes the
    partition before its non-blocking control poll has seen epoch 1. Routing under epoch 0 would
    send partition 0's epochs backwards: B must catch up first."""
    router = make_router(exactly_once=True, committed={("in", 0): 5}, metadata={("in", 0): "ballast-epoch=1"})
    key = b"moved"
    home = router.state.table.route(key)
    router.control.reader.events.append(make_event(1, *routing_update({"moved": (home + 1) % 4})))  # type: ignore[attr-defined]
    router.control.reader.lagging = True  # type: ignore[attr-defined]
    play(router, ("assign", [("in", 0)]), ("batch", [msg(0, 5, key)]))
    data = [(b["epoch"], b["key"]) for br, b in routed(router) if br == "io.ballast.DataRecord"]
    assert data == [(1, "moved")]
    assert markers(router) == [(1, [("in", 0)])] * 4
    assert [s.partition for s in router.producer.sent if s.key == key] == [(home + 1) % 4]  # type: ignore[attr-defined]
    check(router)


def test_the_epoch_is_committed_with_the_offsets():
    router = make_router(exactly_once=True, committed={("in", 0): 0})
    router.control.reader.events.append(make_event(1, *routing_update({"k": 2})))  # type: ignore[attr-defined]
    play(router, ("assign", [("in", 0)]), ("batch", [msg(0, 0)]))
    assert router.consumer.group_metadata[("in", 0)] == "ballast-epoch=1"  # type: ignore[attr-defined]


def test_lost_partitions_abort_and_the_reassignment_starts_with_a_marker():
    """``on_lost`` aborts the open transaction, which held the epoch's markers; the records are
    read again after the re-assignment and must follow a marker again."""
    router = make_router(exactly_once=True, committed={("in", 0): 0})
    play(
        router,
        ("assign", [("in", 0)]),
        ("batch", [msg(0, 0), msg(0, 1)]),
        ("lost", [("in", 0)]),
        ("assign", [("in", 0)]),
        ("batch", [msg(0, 0), msg(0, 1)]),
    )
    assert "abort" in router.producer.calls  # type: ignore[attr-defined]
    topic = check(router)
    assert sorted(frontier.source_counts(topic).values()) == [1, 1]


def test_lost_partitions_rewind_the_ones_still_owned():
    """The aborted transaction also held records of partitions not lost: they are read again from
    the committed offsets, after a marker, instead of being skipped."""
    router = make_router(exactly_once=True, committed={("in", 0): 0, ("in", 1): 0})
    play(
        router,
        ("assign", [("in", 0), ("in", 1)]),
        ("batch", [msg(0, 0), msg(1, 0)]),
        ("lost", [("in", 0)]),
        ("batch", [msg(1, 0), msg(1, 1)]),
    )
    topic = check(router)
    assert frontier.source_counts(topic) == {("in", 1, 0): 1, ("in", 1, 1): 1}
    assert ("in", 1, 0) in router.consumer.seeks  # type: ignore[attr-defined]


def test_an_aborted_transaction_owes_its_marker_again():
    router = make_router(exactly_once=True, committed={("in", 0): 0})
    abortable = KafkaException(KafkaError(KafkaError._FENCED, "x", txn_requires_abort=True))
    router.consumer.script = [("assign", [("in", 0)]), ("batch", [msg(0, 0)]), ("batch", [msg(0, 0)])]  # type: ignore[attr-defined]
    router.start()
    router.step()
    # a new epoch: the open transaction is committed first, and that commit aborts
    router.producer.fail_commit.append(abortable)  # type: ignore[attr-defined]
    router.control.reader.events.append(make_event(1, *routing_update({"k": 2})))  # type: ignore[attr-defined]
    router.step()  # abort, rewind to offset 0, epoch 1, marker, offset 0 again
    router.stop()
    router.run()
    assert router.totals.aborts == 1 and router.consumer.seeks == [("in", 0, 0)]  # type: ignore[attr-defined]
    assert [e for e, _ in markers(router)] == [1] * 4
    topic = check(router)
    assert frontier.source_counts(topic) == {("in", 0, 0): 1}


def test_a_commit_that_timed_out_is_resumed_not_restarted():
    """librdkafka: after a retriable ``commit_transaction`` error, call ``commit_transaction``
    again; a second ``send_offsets_to_transaction`` conflicts with the commit in progress. The
    router's ``--commit-attempts`` reaches the checkpoint, and the resumed commit carries the
    markers, the records and the offsets with their epoch."""
    router = make_router(exactly_once=True, committed={("in", 0): 0}, commit_attempts=3)
    slow = KafkaException(KafkaError(KafkaError._TIMED_OUT, "slow broker", retriable=True))
    router.producer.fail_commit += [slow, slow]  # type: ignore[attr-defined]
    play(router, ("assign", [("in", 0)]), ("batch", [msg(0, 0), msg(0, 1)]))
    calls = router.producer.calls  # type: ignore[attr-defined]
    assert calls == ["begin", "send_offsets", "commit:failed", "commit:failed", "commit"]
    assert router.consumer.group_offsets[("in", 0)] == 2  # type: ignore[attr-defined]
    assert router.consumer.group_metadata[("in", 0)] == "ballast-epoch=0"  # type: ignore[attr-defined]
    assert router.totals.commit_retries == 2 and router.totals.transactions == 1
    topic = check(router)
    assert frontier.source_counts(topic) == {("in", 0, 0): 1, ("in", 0, 1): 1}


@pytest.mark.parametrize(
    ("metadata", "epoch"),
    [
        ("ballast-epoch=7", 7),
        (None, 0),
        ("", 0),
        ("ballast-epoch=-3", 0),
        ("ballast-epoch=x", 0),
        ("other", 0),
    ],
)
def test_a_committed_epoch_is_read_back_and_foreign_metadata_holds_nobody_back(metadata, epoch):
    assert epochs.epoch_of(epochs.epoch_metadata(7)) == 7
    assert epochs.epoch_of(metadata) == epoch


def test_routers_started_with_defaults_get_distinct_instance_ids():
    """The old default, ``router-0`` for every instance, gave two routers one transactional.id
    and one group.instance.id: each start fenced the other."""
    a, b = RouterSettings().resolved("ballast"), RouterSettings().resolved("ballast")
    assert a.router_id != b.router_id
    assert a.transactional_id != b.transactional_id
    assert str(os.getpid()) in a.router_id
    assert RouterSettings(router_id="r7").router_id == "r7"  # a given id stays stable


@pytest.mark.parametrize("idle_commits", [False, True])
def test_commit_when_idle_ends_the_transaction_at_the_first_empty_poll(idle_commits):
    """A burst of input is routed; the next poll finds nothing. With --commit-when-idle the burst is
    committed right then (one transaction, no timer); without it, the interval is still open."""
    router = make_router(
        exactly_once=True,
        committed={("in", 0): 0},
        commit_interval_ms=3_600_000,
        commit_when_idle=idle_commits,
    )
    router.consumer.script = [("assign", [("in", 0)]), ("batch", [msg(0, 0), msg(0, 1)]), ("batch", [])]
    router.start()
    for _ in range(3):
        router.step()
    assert router.producer.calls.count("commit") == (1 if idle_commits else 0)
    assert router.checkpoint.is_open is not idle_commits
    if idle_commits:  # the burst is visible to a read_committed reader already
        assert [b["source_offset"] for br, b in routed(router) if br.endswith("DataRecord")] == [0, 1]
    router.stop()
    router.run()
