"""The control log on Kafka: a reader that folds the topic, and the one fenced writer.

Why a transactional writer with a fixed ``transactional.id``: ``init_transactions`` fences any
older writer with the same id and completes its open transaction, so reading the last epoch
*after* it and writing ``last + 1`` cannot race another writer into a duplicate epoch. The id is
derived from the control topic (:func:`writer_transactional_id`), so every writer of one control
log (the controller, ``ballast control send``, the demo, tests) fences every other.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from ballast.avro.codec import AvroCodec
from ballast.control.state import CONTROL_SCHEMA, ControlLogError, ControlState, apply_event, make_event
from ballast.kafka.config import KafkaConfig
from ballast.waiting import WaitTimeout, wait_until

# a control topic created moments ago answers these until its leader is elected
_NOT_READY = (
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
)


def writer_transactional_id(control_topic: str) -> str:
    """The one transactional id of the writers of ``control_topic``."""
    return f"ballast-control-writer.{control_topic}"




class ControlLogReader:
    """Follows the single-partition control topic from offset 0 (read_committed) and folds it.

    Not in a consumer group: every reader sees every event. ``read_to_end`` blocks until the state
    reflects everything committed when it was called; ``poll`` is non-blocking and returns the new
    events folded since the last call (the caller decides when to apply them).
    """

    def __init__(self, kafka: KafkaConfig, topic: str, initial: ControlState, start_offset: int = 0) -> None:
        from confluent_kafka import Consumer, TopicPartition

        self.topic = topic
        self.state = initial
        self.codec = AvroCodec(CONTROL_SCHEMA)
        self._tp = TopicPartition(topic, 0, start_offset)
        self._last_offset = start_offset - 1
        self.consumer = Consumer(
            kafka.consumer(
                f"ballast-control-reader-{id(self):x}",
                **{"isolation.level": "read_committed", "fetch.wait.max.ms": 50},
            )
        )
        self.consumer.assign([self._tp])

    def _fold_messages(self, msgs: list) -> list[dict[str, Any]]:
        events = []
        for m in msgs:
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    continue
                raise ControlLogError(f"control topic error: {m.error()}")
            try:
                event = self.codec.decode(m.value(), m.topic(), m.partition(), m.offset())
            except Exception as exc:
                raise ControlLogError(f"undecodable control event at offset {m.offset()}: {exc}") from exc
            self._last_offset = m.offset()
            before = self.state.epoch
            self.state = apply_event(self.state, event)
            if self.state.epoch != before:
                events.append(event)
        return events

    def poll(self, timeout: float = 0.0, max_events: int = 1000) -> list[dict[str, Any]]:
        """New (non-duplicate) events folded into :attr:`state`, in epoch order."""
        return self._fold_messages(self.consumer.consume(max_events, timeout=timeout))

    def read_to_end(self, timeout: float = 30.0) -> list[dict[str, Any]]:
        """Fold everything committed up to now (the last stable offset when called).

        A router is often started right after ``ballast topics create``: a control topic whose
        leader is not elected yet is waited for (up to ``timeout``), not a reason to crash.
        """
        from confluent_kafka import TopicPartition

        def end_offset() -> tuple[int] | None:
            try:
                _low, high = self.consumer.get_watermark_offsets(
                    TopicPartition(self.topic, 0), timeout=min(timeout, 5.0), cached=False
                )
            except KafkaException as exc:
                err = exc.args[0]
                if err.retriable() or err.code() in _NOT_READY:
                    return None
                raise
            return (high,)

        try:
            (high,) = wait_until(end_offset, timeout, f"the end of control topic {self.topic}", interval=0.2)
        except WaitTimeout as exc:
            raise ControlLogError(str(exc)) from None
        events: list[dict[str, Any]] = []

        def caught_up() -> bool:
            position = self.consumer.position([TopicPartition(self.topic, 0)])[0].offset
            if high <= 0 or position >= high:
                return True
            events.extend(self.poll(timeout=0.2))
            return False

        try:
            wait_until(caught_up, timeout, f"reading control topic {self.topic} to offset {high}", interval=0)
        except WaitTimeout as exc:
            raise ControlLogError(str(exc)) from None
        return events

    def close(self) -> None:
        self.consumer.close()


class ControlLogWriter:
    """Appends events with dense epochs; a fixed ``transactional.id`` fences any second writer."""

    def __init__(
        self,
        kafka: KafkaConfig,
        topic: str,
        initial: ControlState,
        issuer: str = "ballast-control-cli",
    ) -> None:
        from confluent_kafka import Producer

        self.kafka = kafka
        self.topic = topic
        self.initial = initial
        self.issuer = issuer
        self.codec = AvroCodec(CONTROL_SCHEMA)
        self.producer = Producer(kafka.producer(**{"transactional.id": writer_transactional_id(topic)}))
        self.producer.init_transactions(30)
        self._reader: ControlLogReader | None = None
        self._written_epoch = 0

    def current_state(self, timeout: float = 30.0) -> ControlState:
        """The folded log, including this writer's own earlier sends.

        Right after ``commit_transaction`` returns, the commit markers may not be written yet, so
        the last stable offset can still hide our own event; wait until the reader has it.
        """
        if self._reader is None:
            self._reader = ControlLogReader(self.kafka, self.topic, self.initial)
        reader = self._reader
        reader.read_to_end(timeout)

        def own_event_visible() -> bool:
            if reader.state.epoch >= self._written_epoch:
                return True
            reader.poll(timeout=0.2)
            return False

        try:
            wait_until(own_event_visible, timeout, f"own event {self._written_epoch} visible", interval=0)
        except WaitTimeout as exc:
            raise ControlLogError(str(exc)) from None
        return reader.state

    def send(self, etype: str, body: Mapping[str, Any], timeout: float = 30.0) -> dict[str, Any]:
        """Validate against the folded log, then write ``last epoch + 1`` in one transaction."""
        state = self.current_state(timeout)
        event = make_event(state.epoch + 1, etype, body, issuer=self.issuer)
        apply_event(state, event)  # refuse to write an event the readers would reject
        self.producer.begin_transaction()
        self.producer.produce(self.topic, value=self.codec.encode(event), key=str(event["epoch"]).encode())
        self.producer.commit_transaction(timeout)
        self._written_epoch = event["epoch"]
        return event

    def close(self) -> None:
        """Flush and close the producer and the reader: no client outlives the writer."""
        self.producer.flush(10)
        self.producer.close()
        if self._reader is not None:
            self._reader.close()
