"""``high_watermark`` asks again while a partition's leadership settles after a failover."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from ballast.kafka import clients
from ballast.kafka.clients import high_watermark


class _Answers:
    """A consumer's one call, answering with the errors given first and then ``(0, 42)``."""

    def __init__(self, *errors: int) -> None:
        self.errors = list(errors)
        self.asked = 0

    def get_watermark_offsets(self, tp, timeout, cached):
        self.asked += 1
        if self.errors:
            raise KafkaException(KafkaError(self.errors.pop(0)))
        return 0, 42


@pytest.fixture(autouse=True)
def _no_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(clients.time, "sleep", lambda _s: None)


@pytest.mark.parametrize("code", [
    KafkaError.NOT_LEADER_FOR_PARTITION,
    # a new leader whose high watermark has not caught up with the old one's yet (KIP-207)
    KafkaError.OFFSET_NOT_AVAILABLE,
    KafkaError.LEADER_NOT_AVAILABLE,
])  # fmt: skip
def test_a_settling_leader_is_asked_again(code: int) -> None:
    consumer = _Answers(code, code)
    assert high_watermark(consumer, "t", 0) == 42
    assert consumer.asked == 3


def test_an_error_of_the_request_itself_is_raised_at_once() -> None:
    consumer = _Answers(KafkaError.TOPIC_AUTHORIZATION_FAILED)
    with pytest.raises(KafkaException, match="TOPIC_AUTHORIZATION_FAILED"):
        high_watermark(consumer, "t", 0)
    assert consumer.asked == 1
