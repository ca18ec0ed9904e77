"""The genesis on a real broker: ``create_deployment`` writes it once, keeps it, refuses to contradict
it, gives an old log one, and does not fence a writer that is already running."""

from __future__ import annotations

import pytest

from ballast.avro.codec import AvroCodec
from ballast.control import state as cs
from ballast.control.genesis import Genesis, GenesisConflictError, GenesisMissingError
from ballast.control.log import ControlLogReader
from ballast.control.writer import ControlLogWriter
from ballast.deployment.create import create_deployment
from ballast.kafka.admin import TopicConflictError, ensure_topics
from ballast.kafka.clients import make_producer
from ballast.kafka.reading import read_topic
from ballast.kafka.topics import TopicLayout


def control_events(kafka, layout: TopicLayout, expected: int) -> list[dict]:
    """Every committed record of the control topic, decoded independently of the reader."""
    codec = AvroCodec(cs.CONTROL_SCHEMA)
    msgs = read_topic(kafka, layout.name("control"), min_records=expected, idle=1.0, timeout=30)
    return [codec.decode(m.value()) for m in msgs]


def test_create_writes_the_genesis_once_and_refuses_to_contradict_it(kafka_config, admin, unique):
    layout = TopicLayout(prefix=unique("gen"), workers=6, input_partitions=2)
    first = create_deployment(kafka_config, layout, active_workers=4, admin=admin)
    assert first.genesis_status == "written" and set(first.topics.values()) == {"created"}
    assert first.genesis == Genesis(epoch=0, routed_partitions=6, active_workers=4)

    again = create_deployment(kafka_config, layout, active_workers=4, admin=admin)
    assert again.genesis_status == "exists" and set(again.topics.values()) == {"exists"}
    no_opinion = create_deployment(kafka_config, layout, admin=admin)  # 0 keeps the recorded value
    assert no_opinion.genesis == first.genesis
    with pytest.raises(GenesisConflictError, match="contradicts --active-workers 6"):
        create_deployment(kafka_config, layout, active_workers=6, admin=admin)
    with pytest.raises(TopicConflictError):
        create_deployment(kafka_config, TopicLayout(prefix=layout.prefix, workers=8), admin=admin)

    (event,) = control_events(kafka_config, layout, 1)  # exactly one event, whatever was re-run
    assert (event["epoch"], event["type"]) == (0, "TABLE_SNAPSHOT")
    assert event["payload"][1] == {
        "num_workers": 4,
        "table": {},
        "keep_probability": {},
        "routed_partitions": 6,
        "shed_seed": {},
        "history": None,  # the origin: nothing before it
    }
    reader = ControlLogReader(kafka_config, layout.name("control"))
    try:
        reader.read_to_end()
        assert (reader.state.epoch, reader.state.num_workers, reader.state.max_workers) == (0, 4, 6)
    finally:
        reader.close()


def test_a_log_without_genesis_is_refused_until_create_writes_it(kafka_config, admin, unique):
    layout = TopicLayout(prefix=unique("nogen"), workers=4, input_partitions=1)
    ensure_topics(admin, layout.specs())  # topics made by hand: an empty control log
    reader = ControlLogReader(kafka_config, layout.name("control"))
    try:
        assert reader.genesis() is None
        with pytest.raises(GenesisMissingError, match="run `ballast topics create"):
            reader.read_to_end(timeout=10)
    finally:
        reader.close()
    writer = ControlLogWriter(kafka_config, layout.name("control"))
    try:
        with pytest.raises(GenesisMissingError):
            writer.send(*cs.scale(2))
    finally:
        writer.close()
    assert create_deployment(kafka_config, layout, admin=admin).genesis_status == "written"
    assert [e["epoch"] for e in control_events(kafka_config, layout, 1)] == [0]


def test_an_old_log_with_events_is_rebased(kafka_config, admin, unique):
    """Events written before the genesis existed (epochs from 1): create folds them over its flags
    and appends a snapshot recording the routed partitions; readers start there."""
    layout = TopicLayout(prefix=unique("old"), workers=4, input_partitions=1)
    ensure_topics(admin, layout.specs())
    old = [
        cs.make_event(1, *cs.routing_update({"a": 2, "b": 1}), issued_at=1),
        cs.make_event(2, *cs.scale(3), issued_at=1),
        cs.make_event(3, *cs.shedding("in", 0.5), issued_at=1),
    ]
    codec = AvroCodec(cs.CONTROL_SCHEMA)
    producer = make_producer(kafka_config, **{"transactional.id": f"{layout.prefix}-old-writer"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for e in old:
        producer.produce(layout.name("control"), codec.encode(e), str(e["epoch"]).encode())
    producer.commit_transaction(30)

    created = create_deployment(kafka_config, layout, admin=admin)
    assert created.genesis_status == "rebased"
    assert created.genesis == Genesis(epoch=4, routed_partitions=4, active_workers=3)
    expected = cs.fold(cs.initial_state(4), old)  # ground truth: the pure fold over the same flags
    *_, rebase = control_events(kafka_config, layout, 4)
    assert rebase["epoch"] == 4 and rebase["type"] == "TABLE_SNAPSHOT"
    reader = ControlLogReader(kafka_config, layout.name("control"))
    try:
        assert [e["epoch"] for e in reader.read_to_end()] == [4]  # started at the re-base
        state = reader.state
        assert (state.num_workers, dict(state.table.items()), dict(state.keep_probability)) == (
            expected.num_workers,
            dict(expected.table.items()),
            dict(expected.keep_probability),
        )
    finally:
        reader.close()
    assert create_deployment(kafka_config, layout, admin=admin).genesis_status == "exists"


def test_rerunning_create_does_not_fence_a_running_writer(kafka_config, admin, unique):
    layout = TopicLayout(prefix=unique("fence"), workers=4, input_partitions=1)
    create_deployment(kafka_config, layout, admin=admin)
    writer = ControlLogWriter(kafka_config, layout.name("control"), issuer="controller")
    try:
        assert writer.send(*cs.routing_update({"k": 1}))["epoch"] == 1
        create_deployment(kafka_config, layout, admin=admin)  # an operator re-runs `topics create`
        assert writer.send(*cs.routing_update({"k": 2}))["epoch"] == 2  # still the writer: not fenced
    finally:
        writer.close()
