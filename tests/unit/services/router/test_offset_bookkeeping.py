"""The router's per-partition offset bookkeeping, on its real batch function.

Why: a rebalance callback runs inside ``consume()``; records fetched before it can still arrive
in the batch, and after a re-assignment the same offsets are fetched again. The router must route
each offset once and commit only what it processed. The producer here records calls instead of
talking to a broker (the integration tests run the same code against a real one); everything else
— routing, envelopes, bookkeeping — is the production code path.
"""

from __future__ import annotations

import pytest
from confluent_kafka import Message, TopicPartition

from ballast.avro.codec import AvroCodec
from ballast.avro.wire import INPUT_HEADER, encode_input_body
from ballast.control.state import ControlState
from ballast.kafka.config import KafkaConfig
from services.router.config import RouterConfig
from services.router.router import Router
from services.router.stats import IntervalStats

pytestmark = pytest.mark.unit


class RecordingProducer:
    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes, bytes | None, int]] = []

    def produce(self, topic, value=None, key=None, partition=-1, headers=None):
        self.sent.append((topic, value, key, partition))

    def poll(self, timeout: float = 0) -> int:
        return 0


def _router() -> Router:
    router = Router(
        RouterConfig(router_id="r-test", prefix="t"), KafkaConfig(bootstrap_servers="127.0.0.1:1")
    )
    router.producer = RecordingProducer()  # type: ignore[assignment]
    router.n_routed = 4
    router._apply_state(ControlState(num_workers=4, max_workers=4), initial=True)
    router.stats = IntervalStats(4, 100, 10, 0)
    return router


def _msg(partition: int, offset: int) -> Message:
    key = f"k{offset}".encode()
    value = INPUT_HEADER + encode_input_body(key, 1.0, offset.to_bytes(8, "big"), 1000 + offset)
    return Message(topic="in", partition=partition, offset=offset, key=key, value=value)


def _routed_offsets(router: Router) -> list[int]:
    codec = AvroCodec("io.ballast.RoutedEnvelope")
    return [codec.decode(v)["body"][1]["source_offset"] for _, v, _, _ in router.producer.sent]  # type: ignore[attr-defined]


def test_each_offset_routed_once_and_only_processed_offsets_committed():
    router = _router()
    router._next_offset[("in", 0)] = 5  # assigned, committed offset 5
    batch = [
        _msg(0, 3), _msg(0, 4),  # below the committed offset: processed before
        _msg(0, 5), _msg(0, 6),
        _msg(1, 0),  # partition 1 is not ours (revoked during consume())
        _msg(0, 5), _msg(0, 6),  # the same offsets fetched again after a re-assignment
        _msg(0, 7),
    ]  # fmt: skip
    router._route_batch(batch)
    assert _routed_offsets(router) == [5, 6, 7]
    assert router.totals.offered == 3 and router.totals.refetched == 5
    assert router._positions() == [TopicPartition("in", 0, 8)]


def test_revoked_partition_is_forgotten_and_not_committed():
    router = _router()
    router._next_offset[("in", 0)] = 0
    router._next_offset[("in", 2)] = -1  # assigned, nothing committed yet
    router._route_batch([_msg(0, 0), _msg(2, 10)])
    assert sorted((tp.partition, tp.offset) for tp in router._positions()) == [(0, 1), (2, 11)]
    router._forget([TopicPartition("in", 0)])
    router._route_batch([_msg(0, 1)])  # arrives after the revoke: not ours any more
    assert [(tp.partition, tp.offset) for tp in router._positions()] == [(2, 11)]
    assert _routed_offsets(router) == [0, 10]


def test_large_source_offsets_are_encoded_like_avro():
    """The hot path builds the offset varint from a table plus cached high bits; fastavro must agree."""
    router = _router()
    offsets = [8191, 8192, 16_383, 16_384, 2_097_151, 2_097_152, 123_456_789, 2**40]
    for off in offsets:
        router._next_offset[("in", 0)] = off
        router._route_batch([_msg(0, off)])
    assert _routed_offsets(router) == offsets
