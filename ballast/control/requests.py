"""Asking the controller for a change of the control log: a request, and waiting for its answer.

Why requests and not writes: the control log has one writer, the controller (services/controller),
so that every change gets one place in one order and is checked against the state it lands on.
Everyone else (``ballast control send``, the shedder, a planner of one's own, the tests) sends a
``ControlRequest`` keyed by a request id and reads the ``ControlResponse`` with that id.

Why the response consumer is positioned *before* the request is sent: a fast controller can answer
before a consumer started afterwards would have found the end of the responses topic. Why a
request id the caller may choose: a sender that crashed after sending can send the same id again
and gets the first answer, never a second event (the controller dedupes by id).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import TopicPartition

from ballast.avro.codec import AvroCodec, CodecError
from ballast.kafka.clients import make_consumer, make_producer
from ballast.kafka.configuration import KafkaConfig
from ballast.kafka.identities import scratch_group
from ballast.kafka.topics import TopicLayout

RECORDS = {
    "ROUTING_UPDATE": "io.ballast.RoutingUpdateRequest",
    "SCALE": "io.ballast.ScaleRequest",
    "SHEDDING": "io.ballast.SheddingRequest",
    "REBALANCE": "io.ballast.RebalanceRequest",
}


class NoControllerError(RuntimeError):
    """No controller answered within the time-out."""


@dataclass(frozen=True)
class Response:
    """The controller's answer (see ``ballast/schemas/control_response.avsc``)."""

    request_id: str
    accepted: bool
    epoch: int
    reason: str = ""
    detail: str = ""
    duplicate: bool = False
    controller: str = ""
    answered_at: int = 0

    @classmethod
    def of(cls, raw: Mapping[str, Any]) -> Response:
        return cls(**{k: raw[k] for k in cls.__dataclass_fields__ if k in raw})


def new_request_id(issuer: str) -> str:
    return f"{issuer}-{uuid.uuid4().hex}"


class ControlClient:
    """Sends requests to the controller of one deployment and waits for the answers."""

    def __init__(
        self, kafka: KafkaConfig, layout: TopicLayout, issuer: str, clock: Callable[[], float] = time.time
    ) -> None:
        self.issuer = issuer
        self.clock = clock  # stamps issued_at (seconds); information only: the controller ages by the broker
        self.requests_topic = layout.name("requests")
        self.responses_topic = layout.name("responses")
        self._codec = AvroCodec("io.ballast.ControlRequest")
        self._answers = AvroCodec("io.ballast.ControlResponse")
        self._producer = make_producer(kafka.with_client_id(f"{issuer}-requests"))
        self._consumer = make_consumer(
            kafka.with_client_id(f"{issuer}-responses"),
            scratch_group("control-client"),
            **{"enable.auto.commit": False, "isolation.level": "read_committed", "fetch.wait.max.ms": 10},
        )
        tp = TopicPartition(self.responses_topic, 0)
        _low, high = self._consumer.get_watermark_offsets(tp, timeout=15, cached=False)
        self._consumer.assign([TopicPartition(self.responses_topic, 0, high)])
        self._seen: dict[str, Response] = {}

    def encode(
        self,
        kind: str,
        body: Mapping[str, Any],
        request_id: str,
        expected_epoch: int | None = None,
        record: str | None = None,
    ) -> bytes:
        """The request's bytes; ``record``: the payload's record (default: the one ``kind`` names;
        an unknown kind travels as a SCALE payload, to be refused by the controller)."""
        record = record or RECORDS.get(kind, RECORDS["SCALE"])
        return self._codec.encode(
            {
                "request_id": request_id,
                "issuer": self.issuer,
                "issued_at": int(self.clock() * 1000),
                "expected_epoch": expected_epoch,
                "kind": kind,
                "payload": (record, dict(body)),
            }
        )

    def send(
        self,
        kind: str,
        body: Mapping[str, Any],
        *,
        expected_epoch: int | None = None,
        request_id: str | None = None,
    ) -> str:
        """Send one request (not waiting for its answer); its id. Sending an id again (after a
        refusal: the controller judges it anew) forgets the answer it got, to wait for the new one."""
        rid = request_id or new_request_id(self.issuer)
        self._seen.pop(rid, None)
        self.send_raw(self.encode(kind, body, rid, expected_epoch), rid)
        return rid

    def send_raw(self, value: bytes, request_id: str) -> None:
        """Bytes as a request keyed by ``request_id`` (a test sends malformed ones this way)."""
        self._producer.produce(self.requests_topic, value=value, key=request_id.encode())
        self._producer.flush(30)

    def wait(self, request_ids: list[str], timeout: float) -> dict[str, Response]:
        """The answers to ``request_ids`` that arrive within ``timeout`` (all of them, or fewer)."""
        wanted = set(request_ids)
        deadline = time.monotonic() + timeout
        while not wanted <= set(self._seen) and time.monotonic() < deadline:
            for m in self._consumer.consume(1000, timeout=0.1):
                if m.error():
                    continue
                try:
                    response = Response.of(self._answers.decode(m.value()))
                except CodecError:
                    continue
                self._seen[response.request_id] = response
        return {rid: self._seen[rid] for rid in request_ids if rid in self._seen}

    def request(
        self,
        kind: str,
        body: Mapping[str, Any],
        *,
        timeout: float = 10.0,
        expected_epoch: int | None = None,
        request_id: str | None = None,
    ) -> Response:
        """Send and wait for the answer; :class:`NoControllerError` when none comes in time."""
        rid = self.send(kind, body, expected_epoch=expected_epoch, request_id=request_id)
        got = self.wait([rid], timeout)
        if rid not in got:
            raise NoControllerError(
                f"no controller answered within {timeout:g} s (request {rid} is queued in "
                f"{self.requests_topic}); start one with `ballast controller run`"
            )
        return got[rid]

    def close(self) -> None:
        self._producer.flush(10)
        self._consumer.close()
