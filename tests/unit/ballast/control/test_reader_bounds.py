"""The control log's end asked right after the topic was made: on a 3-broker cluster the broker
asked may not know the partition yet (librdkafka's local ``_UNKNOWN_PARTITION``); that is a topic
not ready yet, waited for like a leader election, not a reason to fail ``topics create``.

Found by the fault campaign (docs/chaos.md): a short run on three brokers failed in
``create_deployment`` with ``Failed to get watermark offsets: Local: Unknown partition``.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from ballast.control.log import ControlLogReader

pytestmark = pytest.mark.unit


class NotYetKnown:
    """Answers ``_UNKNOWN_PARTITION`` ``misses`` times, then the watermarks."""

    def __init__(self, misses: int, code: int = KafkaError._UNKNOWN_PARTITION) -> None:
        self.misses, self.code, self.calls = misses, code, 0

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float = -1, cached: bool = False):
        self.calls += 1
        if self.calls <= self.misses:
            raise KafkaException(KafkaError(self.code))
        return (0, 3)


def _reader(consumer: NotYetKnown) -> SimpleNamespace:
    return SimpleNamespace(consumer=consumer, topic="t.control", _tp=TopicPartition("t.control", 0))


def test_a_partition_the_broker_does_not_know_yet_is_waited_for() -> None:
    consumer = NotYetKnown(misses=3)
    assert ControlLogReader.bounds(_reader(consumer), timeout=10) == (0, 3)  # type: ignore[arg-type]
    assert consumer.calls == 4


def test_other_errors_still_fail_at_once() -> None:
    consumer = NotYetKnown(misses=1, code=KafkaError.TOPIC_AUTHORIZATION_FAILED)
    with pytest.raises(KafkaException):
        ControlLogReader.bounds(_reader(consumer), timeout=10)  # type: ignore[arg-type]
