"""A well-formed event forged at the next epoch of a live pipeline's control log (issue 28, item 3).

Before: every reader folded it (a plain producer's ``SCALE`` at the next epoch steered every router
and reduce worker), and the controller, numbering from its own state, then wrote a conflicting
duplicate of that epoch, which every reader refused: the pipeline stopped for good.

* A signed log (``Pipeline(signing_key=...)``): a forged event without a signature, one with a
  signature of nothing and one signed by another key change nothing; the controller's next event
  takes that epoch; the router routes under it and the reduce's reader folds it; each forgery has
  one dead letter from the controller with its reason; nothing exits.
* An unsigned log: the forgery is folded (nothing tells it apart; docs/security.md), and the
  controller, which would now write a conflicting epoch, refuses to write (one line, exit 4)
  instead: no epoch of the log has two contents.
"""

from __future__ import annotations

import pytest

from ballast.avro.codec import AvroCodec
from ballast.control.requests import ControlClient
from ballast.control.signing import SIGNATURE_HEADER, SigningKey
from ballast.control.state import CONTROL_SCHEMA, event_digest, make_event, routing_update
from ballast.harness.pipeline import Pipeline
from ballast.kafka.clients import make_producer
from ballast.kafka.dead_letters import CONTROLLER, DeadLetter
from ballast.kafka.reading import read_topic
from ballast.kafka.topics import TopicLayout
from ballast.routing.murmur2 import kafka_partition
from spark_jobs.reduce.ownership_log import OwnershipLog

WORKERS = 4
CODEC = AvroCodec(CONTROL_SCHEMA)


@pytest.fixture
def folder(tmp_path):
    return tmp_path / "stack"


def pipeline(kafka_config, unique, folder, signing_key=None) -> Pipeline:
    layout = TopicLayout(prefix=unique("forged"), workers=WORKERS, input_partitions=2)
    return Pipeline(kafka_config, layout, folder, issuer="forgery-tests", signing_key=signing_key)


def forge(pipe: Pipeline, epoch: int, headers_of: list) -> list[int]:
    """A well-formed routing update at ``epoch`` (:data:`STOLEN` to worker 2), once per headers (a
    plain producer); offsets."""
    value = CODEC.encode(make_event(epoch, *routing_update({STOLEN: 2}, (), "forged"), issuer="controller"))
    key = str(epoch).encode()
    offsets: list[int] = []

    def delivered(err, msg) -> None:
        assert err is None, err
        offsets.append(msg.offset())

    producer = make_producer(pipe.kafka)
    for headers in headers_of:
        h = headers(key, value) if callable(headers) else headers
        producer.produce(pipe.layout.name("control"), value=value, key=key, headers=h, on_delivery=delivered)
    assert producer.flush(30) == 0
    return sorted(offsets)


def control_letters(pipe: Pipeline, at_least: int) -> list[DeadLetter]:
    control = pipe.layout.name("control")
    found = read_topic(
        pipe.kafka, pipe.layout.name("dead_letter"), min_records=at_least, idle=3.0, timeout=120
    )
    letters = [(DeadLetter.of(m), dict(m.headers() or [])) for m in found]
    return [d for d, headers in letters if d.topic == control and CONTROLLER in headers]


def moved_key(target: int) -> str:
    return next(f"hot-{i}" for i in range(100) if kafka_partition(f"hot-{i}".encode(), WORKERS) != target)


STOLEN = next(f"stolen-{i}" for i in range(100) if kafka_partition(f"stolen-{i}".encode(), WORKERS) != 2)


def test_forged_events_on_a_signed_log_change_nothing(kafka_config, unique, folder, tmp_path):
    pipe = pipeline(kafka_config, unique, folder, signing_key=tmp_path / "control.pem")
    stranger = SigningKey.create(tmp_path / "stranger.pem")
    control = pipe.layout.name("control")
    client = ControlClient(pipe.kafka, pipe.layout, "forgery-test")
    log = None
    try:
        pipe.start(pipe.controller("c1", rebalance=False))
        pipe.start(pipe.router("r1", commit_interval_ms=100, log_level="warning"))
        log = OwnershipLog(pipe.kafka, control, WORKERS)  # the reduce's reader, as a Python worker has it
        first = client.request("ROUTING_UPDATE", {"assign": {"warm": 1}}, timeout=30)
        assert first.accepted
        log.ensure(first.epoch)
        forged = forge(pipe, first.epoch + 1, [
            None,  # no signature
            [(SIGNATURE_HEADER, b"\x00" * 64)],  # a signature of nothing
            lambda key, value: stranger.headers(control, key, value),  # another key's, valid for it
        ])  # fmt: skip
        key = moved_key(3)
        answer = client.request("ROUTING_UPDATE", {"assign": {key: 3}}, timeout=30)
        assert answer.accepted and answer.epoch == first.epoch + 1  # the forgeries took no epoch
        pipe.wait_epoch(answer.epoch, 120)  # the router routes under the controller's event
        view = log.ensure(answer.epoch, timeout=60)
        assert view.owner(key, answer.epoch) == 3 and view.moves_at(answer.epoch) == {
            key: (kafka_partition(key.encode(), WORKERS), 3)
        }
        assert view.owner(STOLEN, answer.epoch) == kafka_partition(STOLEN.encode(), WORKERS)
        assert log.skipped == {"unsigned": 1, "bad-signature": 2}
        letters = control_letters(pipe, len(forged))
        assert sorted((d.offset, d.reason) for d in letters) == [
            (forged[0], "unsigned"), (forged[1], "bad-signature"), (forged[2], "bad-signature"),
        ]  # fmt: skip
        pipe.check_running("controller-c1", "router-r1")
        printed = pipe.run_command("control", "log", "--prefix", pipe.layout.prefix)
        assert "forged" not in printed and f"{answer.epoch:>7}" in printed
    finally:
        client.close()
        if log is not None:
            log.close()
        pipe.close()


def test_on_an_unsigned_log_the_controller_refuses_to_write_a_conflicting_epoch(kafka_config, unique, folder):
    pipe = pipeline(kafka_config, unique, folder)
    control = pipe.layout.name("control")
    client = ControlClient(pipe.kafka, pipe.layout, "forgery-test")
    try:
        pipe.start(pipe.controller("c1", rebalance=False))
        first = client.request("ROUTING_UPDATE", {"assign": {"warm": 1}}, timeout=30)
        assert first.accepted
        forge(pipe, first.epoch + 1, [None])
        client.send("ROUTING_UPDATE", {"assign": {moved_key(3): 3}})
        code = pipe.wait_exit("controller-c1", 90)
        assert code == 4, pipe.log_tail("controller-c1")
        said = pipe.log("controller-c1")
        assert f"past this controller's {first.epoch}" in said and "Refusing to append" in said
        # no epoch of the log has two contents
        records = read_topic(pipe.kafka, control, idle=2.0, timeout=60)
        contents: dict[int, set[str]] = {}
        for m in records:
            event = CODEC.decode(m.value())
            contents.setdefault(int(event["epoch"]), set()).add(event_digest(event))
        assert all(len(c) == 1 for c in contents.values()), contents
        assert max(contents) == first.epoch + 1  # the forgery is the log's last event
    finally:
        client.close()
        pipe.close()
