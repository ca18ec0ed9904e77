"""A router whose producer fails fatally without being fenced goes on with a new producer.

Seen in the fault campaign (seed 1): a router SIGSTOPped past its group session while a broker
failed over came back to `partitions lost`; the abort of its open transaction failed with
INVALID_TXN_STATE, which librdkafka makes fatal, and the router exited (restarted by its
supervisor, counted as an unexpected exit). A producer that was *fenced* (another live instance
with the same transactional id) must still end the router: renewing would fence the live one.

Judged as a read_committed reader of the routed topic would see it, against the test's input.
"""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from ballast.kafka.checkpoint import CheckpointError
from tests.support.kafka_fakes import RecordingProducer
from tests.support.router_fakes import ENVELOPE, ROUTED, make_router, msg, play

pytestmark = pytest.mark.unit


class FailingAbort(RecordingProducer):
    """A producer whose first abort fails fatally with ``code``, as librdkafka reports it."""

    def __init__(self, consumer, code: int) -> None:
        super().__init__(consumer)
        self.code = code

    def abort_transaction(self, timeout: float = -1) -> None:
        self.calls.append("abort:failed")
        self.pending = []  # nothing of the open transaction ever becomes visible
        raise KafkaException(KafkaError(self.code, "Failed to end transaction", fatal=True))


def data_offsets(producer: RecordingProducer) -> list[int]:
    """The source offsets of the data records ``producer`` made visible (committed)."""
    bodies = [ENVELOPE.decode(s.value)["body"] for s in producer.sent if s.topic == ROUTED]
    return [b["source_offset"] for branch, b in bodies if branch == "io.ballast.DataRecord"]


def router_with(code: int, renew: bool, again: bool = False):
    """A router whose producer's abort fails fatally with ``code``; with ``renew`` it can build new
    producers (failing the same way too, with ``again``), listed in the returned list."""
    renewed: list[RecordingProducer] = []

    def new_producer(consumer) -> RecordingProducer:
        renewed.append(FailingAbort(consumer, code) if again else RecordingProducer(consumer))
        return renewed[-1]

    router = make_router(
        exactly_once=True, committed={("in", 0): 0}, producer=lambda c: FailingAbort(c, code),
        new_producer=new_producer if renew else None,
    )  # fmt: skip
    return router, router.producer, renewed


def test_a_fatal_abort_after_lost_partitions_renews_the_producer_and_nothing_is_lost_or_doubled():
    router, first, renewed = router_with(KafkaError.INVALID_TXN_STATE, renew=True)
    batch = [msg(0, o) for o in range(5)]
    play(
        router,
        ("assign", [("in", 0)]),
        ("batch", batch),
        ("lost", [("in", 0)]),  # session timed out: the open transaction held offsets 0-4
        ("assign", [("in", 0)]),
        ("batch", batch),  # fetched again from the committed offset
    )
    assert "abort:failed" in first.calls
    assert data_offsets(first) == []  # its transaction never committed
    (new,) = renewed
    assert data_offsets(new) == [0, 1, 2, 3, 4]  # each record once, after the rewind
    assert router.consumer.group_offsets[("in", 0)] == 5
    assert router.totals.producer_renewals == 1


@pytest.mark.parametrize("code", [KafkaError._FENCED, KafkaError.PRODUCER_FENCED])
def test_a_fenced_producer_still_ends_the_router(code):
    router, _, renewed = router_with(code, renew=True)
    with pytest.raises(KafkaException):
        play(router, ("assign", [("in", 0)]), ("batch", [msg(0, 0)]), ("lost", [("in", 0)]))
    assert renewed == []


def test_without_a_way_to_renew_a_fatal_abort_ends_the_router():
    router, _, _ = router_with(KafkaError.INVALID_TXN_STATE, renew=False)
    with pytest.raises(KafkaException):
        play(router, ("assign", [("in", 0)]), ("batch", [msg(0, 0)]), ("lost", [("in", 0)]))


def test_a_producer_that_fails_again_and_again_ends_the_router():
    router, _, renewed = router_with(KafkaError.INVALID_TXN_STATE, renew=True, again=True)
    turn = [("assign", [("in", 0)]), ("batch", [msg(0, 0)]), ("lost", [("in", 0)])]
    with pytest.raises(CheckpointError, match="failed fatally 4 times"):
        play(router, *turn * 4)
    assert len(renewed) == 3
