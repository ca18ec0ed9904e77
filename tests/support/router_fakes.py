"""Driving the production :class:`~services.router.router.Router` without a broker: the fake Kafka
clients of tests/support/kafka_fakes.py injected into it, a static control log, input records and
readers of what it wrote.

They model librdkafka's documented behaviour only as far as the router's unit tests need; the
integration tests run the same code against a real broker.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from confluent_kafka import Message

from ballast.avro.codec import AvroCodec
from ballast.avro.wire import INPUT_HEADER, encode_input_body
from ballast.control.state import ControlState, apply_event, initial_state
from ballast.kafka.topics import TopicLayout
from services.router.config import RouterSettings
from services.router.router import Router
from tests.support.kafka_fakes import RecordingProducer, ScriptedConsumer

LAYOUT = TopicLayout(prefix="t", workers=4)
ROUTED = LAYOUT.name("routed")
DEAD = LAYOUT.name("dead_letter")
ENVELOPE = AvroCodec("io.ballast.RoutedEnvelope")


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
    producer: Callable[[ScriptedConsumer], Any] | None = None,
    new_producer: Callable[[ScriptedConsumer], Any] | None = None,
    **settings: Any,
) -> Router:
    """The production router over the fakes; ``settings`` override :class:`RouterSettings` fields;
    ``producer`` and ``new_producer`` build other fake producers over the consumer (the latter is
    the router's ``new_producer``)."""
    consumer = ScriptedConsumer(committed, metadata)
    base: dict[str, Any] = dict(
        router_id="r-test", exactly_once=exactly_once, stats_interval_s=3600, input_topics=("in",)
    )
    return Router(
        RouterSettings(**(base | settings)),
        LAYOUT,
        consumer=consumer,  # type: ignore[arg-type]
        producer=producer(consumer) if producer else RecordingProducer(consumer, message_max_bytes),  # type: ignore[arg-type]
        control=StaticControl(initial_state(4)),
        routed_partitions=4,
        new_producer=(lambda: new_producer(consumer)) if new_producer else None,
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
