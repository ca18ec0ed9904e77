"""The controller's Kafka side: requests in; events, responses and the requests' offsets out, together.

Why one transaction for all three: a request is *applied* when its event is in the log, *answered*
when its response is in the responses topic, and *consumed* when its offset is committed. Written in
one transaction (the library :class:`~ballast.kafka.checkpoint.Checkpoint`, the router's machinery),
a crash leaves either all three or none, so each accepted request is applied exactly once across
crashes, and a resend is answered from the log by its id (:mod:`services.controller.sequencer`).

Why the log writer's ``transactional.id``: ``init_transactions`` fences every earlier producer with
that id (an older controller, ``ballast control send`` from before requests existed) and completes or
aborts its open transaction, so reading the log *after* it and appending ``last + 1`` cannot race a
second writer. A fenced controller learns it at its next transaction call: :func:`is_fenced`.

Why no consumer group membership: leadership is the transactional fence, not a partition
assignment. Each instance assigns the requests topic's one partition itself and starts at the
offset the group last committed (inside the previous leader's transactions).

Why it signs: with ``BALLAST_CONTROL_SIGNING_KEY_FILE`` set, every event carries the key's
signature (:mod:`ballast.control.signing`); the log's genesis says whether it must, and a
controller without the key of a signed log refuses to start (:func:`~ballast.control.writer.check_signer`).

Why a second, plain producer: :meth:`ControlLink.probe_clock` appends a clock probe to the requests
topic and needs its acknowledgement at once, outside any transaction; the leader's stamp of it is
"now" on the clock the requests' own stamps are on (:mod:`services.controller.request_age`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

from ballast.avro.codec import AvroCodec, CodecError
from ballast.control.log import ControlLogReader, SkippedRecord
from ballast.control.signing import SigningKey, VerifyKey, signing_key_from_env
from ballast.control.state import CONTROL_SCHEMA, ControlState
from ballast.control.writer import check_signer, signed, writer_transactional_id
from ballast.kafka.checkpoint import Checkpoint, CheckpointError
from ballast.kafka.clients import ConfiguredProducer, make_consumer, make_producer
from ballast.kafka.configuration import KafkaConfig
from ballast.kafka.dead_letters import (
    CONTROLLER,
    DETAIL,
    REASON,
    SOURCE_OFFSET,
    SOURCE_PARTITION,
    SOURCE_TOPIC,
)
from ballast.kafka.identities import controller_group, scratch_group
from ballast.kafka.topics import TopicLayout
from services.controller.request_age import PROBE_KIND, append_time_ms

log = logging.getLogger(__name__)

FENCED = (KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH)


def is_fenced(exc: BaseException) -> bool:
    """A transaction call failed because another instance took the log over."""
    if isinstance(exc, CheckpointError) and exc.__cause__ is not None:
        exc = exc.__cause__
    if isinstance(exc, KafkaException) and exc.args:
        err = exc.args[0]
        return isinstance(err, KafkaError) and err.code() in FENCED
    return False


def group_id(layout: TopicLayout) -> str:
    """The group whose committed offset says which requests were consumed (no members ever join)."""
    return controller_group(layout.prefix)


class ControlLink:
    """Requests topic in, control log and responses out, exactly once; see the module docstring."""

    def __init__(
        self,
        kafka: KafkaConfig,
        layout: TopicLayout,
        controller_id: str,
        *,
        on_rewind: Callable[[], None],
        commit_timeout_s: float = 30.0,
        signing_key: SigningKey | None = None,
    ) -> None:
        self.kafka = kafka
        self.signing_key = signing_key if signing_key is not None else signing_key_from_env()
        self.layout = layout
        self.controller_id = controller_id
        self.control_topic = layout.name("control")
        self.dead_letter_topic = layout.name("dead_letter")
        # the audit's last writes in every transaction (services.controller.audit)
        self.before_commit: Callable[[], None] | None = None
        self.requests_topic = layout.name("requests")
        self.responses_topic = layout.name("responses")
        self.events = AvroCodec(CONTROL_SCHEMA)
        self.responses = AvroCodec("io.ballast.ControlResponse")
        self.requests = AvroCodec("io.ballast.ControlRequest")
        self._prober: ConfiguredProducer | None = None  # the clock probes' producer, made at the first
        self.producer = make_producer(
            kafka.with_client_id(f"{controller_id}-producer"),
            **{"transactional.id": writer_transactional_id(self.control_topic), "linger.ms": 0},
        )
        # fences every earlier writer of the log and settles its open transaction
        self.producer.init_transactions(commit_timeout_s)
        self.consumer = make_consumer(
            kafka.with_client_id(f"{controller_id}-requests"),
            group_id(layout),
            **{"enable.auto.commit": False, "isolation.level": "read_committed", "fetch.wait.max.ms": 10},
        )
        self.checkpoint = Checkpoint(
            self.consumer,
            self.producer,
            exactly_once=True,
            commit_interval_s=0.0,
            on_rewind=on_rewind,
            before_commit=self._before_commit,
            name=f"controller {controller_id}",
            commit_timeout_s=commit_timeout_s,
        )
        requests = TopicPartition(self.requests_topic, 0)
        self.checkpoint.on_assign(self.consumer, [requests])
        start = self.checkpoint.offsets[(self.requests_topic, 0)]
        self.consumer.assign([TopicPartition(self.requests_topic, 0, start)])

    # --- the log ------------------------------------------------------------------------------------

    def read_log(
        self,
        initial: ControlState,
        remembered: int,
        timeout: float = 60.0,
        on_skip: Callable[[SkippedRecord], None] | None = None,
    ) -> tuple[ControlState, list[dict[str, Any]], ControlLogReader]:
        """The folded log (after the fence, so nobody appends meanwhile), its last ``remembered``
        events (their request ids answer resends; migrations in flight are read from them) and the
        reader, left open to follow the log (the caller closes it). The state carries the history
        (:mod:`ballast.control.history`), so every snapshot the controller writes has it."""
        reader = ControlLogReader(self.kafka, self.control_topic, initial, history=True, on_skip=on_skip)
        try:
            reader.read_to_end(timeout)
            check_signer(self.control_topic, reader, self.signing_key)
        except BaseException:
            reader.close()
            raise
        return reader.state, self._tail(remembered, timeout, reader.signer), reader

    def _tail(self, count: int, timeout: float, signer: VerifyKey | None) -> list[dict[str, Any]]:
        """The last ``count`` records' events (those ``signer`` signed, on a signed log: a forged
        one must not answer a resend or resume a migration)."""
        consumer = make_consumer(
            self.kafka.with_client_id(f"{self.controller_id}-tail"),
            scratch_group("controller-tail"),
            **{"enable.auto.commit": False, "isolation.level": "read_committed"},
        )
        try:
            tp = TopicPartition(self.control_topic, 0)
            low, high = consumer.get_watermark_offsets(tp, timeout=timeout, cached=False)
            start = max(low, high - count)
            consumer.assign([TopicPartition(self.control_topic, 0, start)])
            events: list[dict[str, Any]] = []
            position = start
            while position < high:
                msgs = consumer.consume(1000, timeout=1.0)
                for m in msgs:
                    if m.error():
                        continue
                    position = m.offset() + 1
                    if signer is not None and signer.check(
                        self.control_topic, m.key(), m.value(), m.headers()
                    ):
                        continue  # the reader skipped it too (and the audit dead-letters it)
                    try:
                        events.append(self.events.decode(m.value()))
                    except CodecError as exc:  # the reader refuses such a log; here it is only memory
                        log.warning("control log offset %d does not decode: %s", m.offset(), exc)
                if not msgs:
                    # transaction markers at the end: the high watermark may count them
                    position = max(position, consumer.position([tp])[0].offset)
                    if position < 0:
                        break
            return events
        finally:
            consumer.close()

    # --- the audit of the log (services.controller.audit) -----------------------------------------

    def audit_offset(self) -> int:
        """The control topic's offset the controllers of this group audited up to (negative: none)."""
        tp = TopicPartition(self.control_topic, 0)
        return int(self.consumer.committed([tp], timeout=30)[0].offset)

    def audited(self, offset: int) -> None:
        """Commit ``offset`` as audited with the next transaction."""
        self.checkpoint.offsets[(self.control_topic, 0)] = offset

    def dead_letter(self, record: SkippedRecord) -> None:
        """A control record that is no event, unchanged, with why and where in headers (open transaction)."""
        headers = [
            (REASON, record.reason.encode()),
            (DETAIL, record.detail.encode("utf-8", "replace")[:4096]),
            (SOURCE_TOPIC, record.topic.encode()),
            (SOURCE_PARTITION, b"0"),
            (SOURCE_OFFSET, str(record.offset).encode()),
            (CONTROLLER, self.controller_id.encode()),
        ]
        self.producer.produce(self.dead_letter_topic, value=record.value, key=record.key, headers=headers)

    def _before_commit(self) -> None:
        if self.before_commit is not None:
            self.before_commit()

    # --- requests ------------------------------------------------------------------------------------

    def poll(self, max_records: int, timeout: float) -> list[Message]:
        """Requests not yet consumed (in order); errors of the consumer raise."""
        msgs = self.consumer.consume(max_records, timeout=timeout)
        out = []
        for m in msgs:
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    continue
                raise KafkaException(m.error())
            out.append(m)
        return out

    def probe_clock(self, timeout: float = 10.0) -> int | None:
        """Append a clock probe to the requests topic and return the leader's stamp of it (ms): the
        broker's time now. None when the topic stamps CreateTime (the stamp would be our own clock)
        or the append failed (said in a warning). The probe is a ``ControlRequest`` of kind
        ``CLOCK_PROBE``: any reader of the topic can decode it; the controller consumes it unanswered."""
        if self._prober is None:
            self._prober = make_producer(
                self.kafka.with_client_id(f"{self.controller_id}-clock"), **{"linger.ms": 0}
            )
        rid = f"{self.controller_id}:clock-probe"
        value = self.requests.encode(
            {
                "request_id": rid,
                "issuer": self.controller_id,
                "issued_at": int(time.time() * 1000),
                "expected_epoch": None,
                "kind": PROBE_KIND,
                "payload": ("io.ballast.RebalanceRequest", {"dry_run": True}),
            }
        )
        delivered: list[tuple[KafkaError | None, Message]] = []
        self._prober.produce(
            self.requests_topic,
            value=value,
            key=rid.encode(),
            partition=0,
            on_delivery=lambda err, msg: delivered.append((err, msg)),
        )
        self._prober.flush(timeout)
        if not delivered or delivered[0][0] is not None:
            error = delivered[0][0] if delivered else f"no acknowledgement within {timeout:g} s"
            log.warning("controller %s: clock probe to %s failed: %s", self.controller_id,
                        self.requests_topic, error)  # fmt: skip
            return None
        return append_time_ms(delivered[0][1].timestamp())

    def consumed(self, message: Message) -> None:
        """``message`` is dealt with: its offset is committed with this transaction."""
        self.checkpoint.offsets[(message.topic(), message.partition())] = message.offset() + 1

    # --- writing --------------------------------------------------------------------------------------

    def begin(self) -> None:
        self.checkpoint.begin()

    def append(self, events: Iterable[Mapping[str, Any]]) -> None:
        """Events of the control log, in epoch order, into the open transaction."""
        for event in events:
            value = self.events.encode(event)
            key = str(event["epoch"]).encode()
            headers = signed(self.signing_key, self.control_topic, key, value)
            self.producer.produce(self.control_topic, value=value, key=key, headers=headers)

    def respond(self, response: Mapping[str, Any]) -> None:
        self.producer.produce(
            self.responses_topic,
            value=self.responses.encode(response),
            key=str(response["request_id"]).encode(),
        )

    def commit(self) -> None:
        """Everything of the open transaction, and the consumed requests' offsets, at once."""
        self.checkpoint.commit()

    def close(self) -> None:
        """Best effort on the way out. A fenced producer's flush raises its fatal error again:
        nothing it still holds can reach the log (its transaction is aborted), so that error is
        logged, not raised, and the process exits with the fenced status it decided on."""
        self.checkpoint.close()
        if self._prober is not None:
            self._prober.flush(5)
        try:
            self.producer.flush(5)
        except KafkaException as exc:
            if not is_fenced(exc):
                raise
            log.info("control link: flush on close after fencing: %s", exc)
        finally:
            self.consumer.close()
