"""Junk on a live pipeline's control topic stops nothing; the next routing update still applies.

Issue 28, item 3: a record on ``<prefix>.control`` that does not decode made every reader raise:
routers exited, reduce tasks failed forever, a restarted controller could not read its own log. A
plain producer (not the control writer) appends: bytes that are no Avro, a record with the Avro
header but nothing readable, an Avro record of another schema, and bytes whose key claims an epoch
far ahead (the reduce's job reads the control records' keys). Then a routing update goes through
the controller. Checked against the test's own record of what it produced and asked:

* the controller and the router keep running, and the router routes under the update's epoch;
* the reduce's reader (what every Spark Python worker runs) folds past the junk to the update,
  and resolves the log's end at the junk's offsets to the epoch before it, not the key's;
* each junk record has exactly one dead letter, written by the controller, with its reason, its
  offset and the controller in headers; a second controller fencing the first starts on the same
  log and writes none again;
* ``ballast control log`` prints the log.
"""

from __future__ import annotations

import pytest

from ballast.avro.codec import AvroCodec
from ballast.control.requests import ControlClient
from ballast.harness.pipeline import Pipeline
from ballast.kafka.clients import make_producer
from ballast.kafka.dead_letters import CONTROLLER, DeadLetter
from ballast.kafka.reading import read_topic
from ballast.kafka.topics import TopicLayout
from ballast.routing.murmur2 import kafka_partition
from spark_jobs.reduce.ownership_log import OwnershipLog

WORKERS = 4
AN_INPUT_EVENT = {"key": "k", "value": 1.0, "event_time": 5, "payload": b""}
JUNK = [
    (None, b"hello, control topic"),
    (b"7", b"\xc3\x01" + b"\x00" * 12),  # the single-object header, nothing readable after it
    (None, AvroCodec("io.ballast.InputEvent").encode(AN_INPUT_EVENT)),  # another topic's record
    (b"999999", b"not an event, a key far ahead"),
]


@pytest.fixture
def deployment(kafka_config, unique, tmp_path):
    layout = TopicLayout(prefix=unique("junk"), workers=WORKERS, input_partitions=2)
    pipe = Pipeline(kafka_config, layout, tmp_path / "stack", issuer="junk-tests")
    try:
        yield pipe
    finally:
        pipe.close()


def produce_junk(pipe: Pipeline) -> list[int]:
    """The junk records, with a plain producer; their offsets."""
    offsets: list[int] = []
    producer = make_producer(pipe.kafka)

    def delivered(err, msg) -> None:
        assert err is None, err
        offsets.append(msg.offset())

    for key, value in JUNK:
        producer.produce(pipe.layout.name("control"), value=value, key=key, on_delivery=delivered)
    assert producer.flush(30) == 0
    return sorted(offsets)


def dead_letters(pipe: Pipeline, at_least: int) -> list[DeadLetter]:
    control = pipe.layout.name("control")
    topic = pipe.layout.name("dead_letter")
    found = read_topic(pipe.kafka, topic, min_records=at_least, idle=3.0, timeout=120)
    letters = [(DeadLetter.of(m), dict(m.headers() or [])) for m in found]
    return [d for d, headers in letters if d.topic == control and CONTROLLER in headers]


def test_junk_on_the_control_topic_stops_nothing_and_the_next_update_applies(deployment):
    pipe = deployment
    control = pipe.layout.name("control")
    pipe.start(pipe.controller("c1", rebalance=False))
    pipe.start(pipe.router("r1", commit_interval_ms=100, log_level="warning"))
    log = OwnershipLog(pipe.kafka, control, WORKERS)  # the reduce's reader, as a Python worker has it
    client = ControlClient(pipe.kafka, pipe.layout, "junk-test")
    try:
        first = client.request("ROUTING_UPDATE", {"assign": {"warm": 1}}, timeout=30)
        assert first.accepted
        log.ensure(first.epoch)
        junk = produce_junk(pipe)
        key = next(f"hot-{i}" for i in range(100) if kafka_partition(f"hot-{i}".encode(), WORKERS) != 3)
        answer = client.request("ROUTING_UPDATE", {"assign": {key: 3}}, timeout=30)
        assert answer.accepted and answer.epoch == first.epoch + 1  # the junk took no epoch
        # the router applied it: its markers of the new epoch in every routed partition
        pipe.wait_epoch(answer.epoch, 120)
        pipe.check_running("controller-c1", "router-r1")
        # the reduce's reader folded past the junk, to the update
        view = log.ensure(answer.epoch, timeout=60)
        assert view.owner(key, answer.epoch) == 3 and view.moves_at(answer.epoch) == {
            key: (kafka_partition(key.encode(), WORKERS), 3)
        }
        assert sum(log.skipped.values()) == len(JUNK)
        # the log's end at each junk record is the epoch before the update, whatever its key says
        assert [log.epoch_through(o) for o in junk] == [first.epoch] * len(JUNK)
        # one dead letter per junk record, from the controller, with its reason and offset
        letters = dead_letters(pipe, len(JUNK))
        assert sorted(d.offset for d in letters) == junk
        assert {d.reason for d in letters} == {"undecodable"}
        assert [d.value for d in sorted(letters, key=lambda d: d.offset)] == [v for _, v in JUNK]
        # a second controller fences the first, reads the same log, and answers
        pipe.start(pipe.controller("c2", rebalance=False))
        again = client.request("ROUTING_UPDATE", {"assign": {"after": 2}}, timeout=30)
        assert again.accepted and again.epoch == answer.epoch + 1
        pipe.wait_epoch(again.epoch, 120)
        assert pipe.wait_exit("controller-c1", 60) == 3  # fenced, as any second controller does
        pipe.check_running("controller-c2", "router-r1")
        assert sorted(d.offset for d in dead_letters(pipe, len(JUNK))) == junk  # not written again
        printed = pipe.run_command("control", "log", "--prefix", pipe.layout.prefix)
        assert f"{again.epoch:>7}" in printed and "ROUTING_UPDATE" in printed
    finally:
        client.close()
        log.close()
