"""Restart cost does not grow with the log: a reader starts at the latest snapshot (found by reading
backwards), folds to the same state as the whole log, the writer appends snapshots every K epochs,
and a long read is not cut off while it makes progress."""

from __future__ import annotations

import time

import pytest

from ballast.avro.codec import AvroCodec
from ballast.control import state as cs
from ballast.control.genesis import genesis_snapshot
from ballast.control.log import ControlLogReader
from ballast.control.writer import ControlLogWriter
from ballast.deployment.create import create_deployment
from ballast.kafka.clients import make_producer
from ballast.kafka.topics import TopicLayout
from ballast.routing.murmur2 import kafka_partition

WORKERS = 4


def write_raw(kafka, topic: str, events: list[dict], per_transaction: int = 500) -> None:
    """Events as the writer would put them, many per transaction (the test's own producer)."""
    codec = AvroCodec(cs.CONTROL_SCHEMA)
    producer = make_producer(kafka, **{"transactional.id": f"{topic}-test-writer"})
    producer.init_transactions(30)
    for i in range(0, len(events), per_transaction):
        producer.begin_transaction()
        for e in events[i : i + per_transaction]:
            producer.produce(topic, codec.encode(e), str(e["epoch"]).encode())
        producer.commit_transaction(30)
    producer.flush(10)


def moves(first: int, count: int) -> list[dict]:
    """ROUTING_UPDATEs from epoch ``first``: each pins two keys away from their hash home."""
    out = []
    for e in range(first, first + count):
        keys = [f"key-{(e * 7 + j) % 300}" for j in range(2)]
        assign = {k: (kafka_partition(k.encode(), WORKERS) + 1 + e % 3) % WORKERS for k in keys}
        out.append(cs.make_event(e, *cs.routing_update(assign), issued_at=e))
    return out


@pytest.fixture
def control_topic(kafka_config, admin, unique) -> str:
    layout = TopicLayout(prefix=unique("restart"), workers=WORKERS, input_partitions=1)
    create_deployment(kafka_config, layout, admin=admin)
    return layout.name("control")


def test_reader_starts_at_the_latest_snapshot_and_folds_like_the_whole_log(kafka_config, control_topic):
    genesis = cs.make_event(0, *genesis_snapshot(WORKERS), issued_at=0)
    before = moves(1, 2_500)
    at_snapshot = cs.fold(cs.initial_state(WORKERS), [genesis, *before])
    snap = cs.make_event(2_501, *cs.table_snapshot(at_snapshot), issued_at=0)
    after = moves(2_502, 40)
    # a snapshot without routed partitions (an older writer) is not a place to start
    old_style = dict(cs.table_snapshot(cs.fold(at_snapshot, [snap, *after]))[1])
    old_style.pop("routed_partitions")
    last = cs.make_event(2_542, "TABLE_SNAPSHOT", old_style, issued_at=0)
    tail = moves(2_543, 5)
    write_raw(kafka_config, control_topic, [*before, snap, *after, last, *tail])  # the genesis is there
    codec = AvroCodec(cs.CONTROL_SCHEMA)  # ground truth folds what a reader decodes (defaults filled)
    written = [codec.decode(codec.encode(e)) for e in [genesis, *before, snap, *after, last, *tail]]
    expected = cs.fold(cs.initial_state(WORKERS), written)

    latest = ControlLogReader(kafka_config, control_topic, cs.initial_state(WORKERS))
    whole = ControlLogReader(kafka_config, control_topic, cs.initial_state(WORKERS), start_offset=0)
    try:
        folded = latest.read_to_end()
        assert [e["epoch"] for e in folded] == list(range(2_501, 2_548))  # from the snapshot on
        assert len(whole.read_to_end()) == 2_548  # the genesis and every event after it
        for reader in (latest, whole):
            s = reader.state
            assert (s.epoch, s.num_workers, s.max_workers) == (expected.epoch, WORKERS, WORKERS)
            assert s.table == expected.table and len(s.table) > 100
            assert dict(s.digests) == dict(expected.digests)
        assert latest.last_snapshot_epoch == 2_501
        # both go on following the log
        write_raw(kafka_config, control_topic, moves(2_548, 3))
        for reader in (latest, whole):
            deadline = time.monotonic() + 30
            while reader.state.epoch < 2_550 and time.monotonic() < deadline:
                reader.poll(0.2)
            assert reader.state.epoch == 2_550
    finally:
        latest.close()
        whole.close()


def test_writer_appends_a_snapshot_every_k_epochs(kafka_config, control_topic):
    writer = ControlLogWriter(kafka_config, control_topic, snapshot_every=5)
    try:
        sent = [writer.send(*cs.routing_update({f"k{i}": i % WORKERS}))["epoch"] for i in range(12)]
    finally:
        writer.close()
    # at epoch 5, five epochs passed since the genesis: a snapshot follows at 6; again at 11 -> 12
    assert sent == [1, 2, 3, 4, 5, 7, 8, 9, 10, 11, 13, 14]
    whole = ControlLogReader(kafka_config, control_topic, start_offset=0)
    latest = ControlLogReader(kafka_config, control_topic)
    try:
        events = whole.read_to_end()
        snapshots = [e["epoch"] for e in events if e["type"] == "TABLE_SNAPSHOT"]
        assert snapshots == [0, 6, 12]
        assert [e["epoch"] for e in latest.read_to_end()] == [12, 13, 14]
        assert latest.state.table == whole.state.table and latest.state.epoch == 14
    finally:
        whole.close()
        latest.close()


def test_a_long_read_that_keeps_moving_is_not_cut_off(kafka_config, control_topic):
    """A log that takes longer than ``timeout`` to read but keeps moving is read to its end (a
    reader that stops moving fails: tests/unit/ballast/control/test_reader_progress.py)."""
    write_raw(kafka_config, control_topic, moves(1, 3_000), per_transaction=3_000)
    reader = ControlLogReader(kafka_config, control_topic, start_offset=0)
    slow_fold = reader._builder.apply
    slowed: list[int] = []

    def apply_slowly(event):  # 3,000 events x 0.4 ms: longer in total than the timeout
        time.sleep(0.0004)  # a sleep never returns early
        slowed.append(int(event["epoch"]))
        return slow_fold(event)

    reader._builder.apply = apply_slowly  # type: ignore[method-assign]
    try:
        reader.read_to_end(timeout=0.8)
        # the premise, counted: the genesis and every move took the slow fold, 3,001 x 0.4 ms > 0.8 s
        assert reader.state.epoch == 3_000 and slowed == list(range(3_001))
    finally:
        reader.close()
