"""The control log: a pure state machine over control events, and a reader/writer for the topic.

Why a pure fold: every router (and later the controller, the workers and the shedder) must derive
the *same* routing state from the same log, and must notice a broken log instead of guessing. So
:class:`ControlState` is immutable and :func:`apply_event` is a total function that either returns
the next state or raises :class:`ControlLogError`: epochs are dense (event e+1 follows e), a gap is
an error, a duplicate epoch is ignored only when its content is identical (a retried send), and a
``TABLE_SNAPSHOT`` lets a reader that starts at it (instead of offset 0) begin there.

Why a transactional writer with a fixed ``transactional.id``: ``init_transactions`` fences any
older writer with the same id and completes its open transaction, so reading the last epoch
*after* it and writing ``last + 1`` cannot race another writer into a duplicate epoch.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from ballast.avro.codec import AvroCodec
from ballast.kafka.config import KafkaConfig

CONTROL_SCHEMA = "io.ballast.ControlEvent"
CONTROL_TYPES = ("ROUTING_UPDATE", "TABLE_SNAPSHOT", "MIGRATION_STEP", "SCALE", "SHEDDING")
PAYLOAD_RECORD = {
    "ROUTING_UPDATE": "io.ballast.RoutingUpdate",
    "TABLE_SNAPSHOT": "io.ballast.TableSnapshot",
    "MIGRATION_STEP": "io.ballast.MigrationStep",
    "SCALE": "io.ballast.Scale",
    "SHEDDING": "io.ballast.Shedding",
}
DEFAULT_WRITER_TXN_ID = "ballast-control-writer"


class ControlLogError(RuntimeError):
    """The log cannot be folded: a gap, a conflicting duplicate, or an invalid event. Stop, don't skip."""


def _freeze(m: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return MappingProxyType(dict(m or {}))


def event_digest(event: Mapping[str, Any]) -> str:
    """Identity of an event's *content* (type + payload), ignoring issuer and issue time."""
    payload = event["payload"]
    body = payload[1] if isinstance(payload, tuple) else payload
    blob = json.dumps([event["type"], body], sort_keys=True, default=repr)
    return hashlib.sha256(blob.encode()).hexdigest()


@dataclass(frozen=True)
class ControlState:
    """Routing state after folding the log up to ``epoch`` (epoch 0 = hash-only, nothing applied).

    ``max_workers`` (the routed topic's partition count) bounds ``num_workers`` and every table
    entry; ``None`` means unchecked. ``started`` is False until the first event is folded, which is
    what lets a reader begin at a snapshot.
    """

    num_workers: int
    epoch: int = 0
    table: Mapping[str, int] = field(default_factory=dict)
    keep_probability: Mapping[str, float] = field(default_factory=dict)
    max_workers: int | None = None
    digests: Mapping[int, str] = field(default_factory=dict)
    started: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "table", _freeze(self.table))
        object.__setattr__(self, "keep_probability", _freeze(self.keep_probability))
        object.__setattr__(self, "digests", _freeze(self.digests))
        if self.num_workers < 1:
            raise ControlLogError(f"num_workers must be >= 1, got {self.num_workers}")
        if self.max_workers is not None and self.num_workers > self.max_workers:
            raise ControlLogError(
                f"num_workers {self.num_workers} exceeds the {self.max_workers} routed partitions"
            )

    def keep_for(self, target: str) -> float:
        """Keep-probability of an input topic / job: its own setting, else ``*``, else 1.0."""
        kp = self.keep_probability
        return float(kp.get(target, kp.get("*", 1.0)))


def _check_worker(state: ControlState, key: str, worker: int, num_workers: int) -> None:
    if not 0 <= worker < num_workers:
        raise ControlLogError(
            f"epoch {state.epoch + 1}: key {key!r} -> worker {worker} outside 0..{num_workers - 1}"
        )


def apply_event(state: ControlState, event: Mapping[str, Any]) -> ControlState:
    """Fold one decoded ControlEvent into ``state``; raise :class:`ControlLogError` rather than skip."""
    epoch = int(event["epoch"])
    etype = event["type"]
    payload = event["payload"]
    body: Mapping[str, Any] = payload[1] if isinstance(payload, tuple) else payload
    digest = event_digest(event)
    if state.started and epoch <= state.epoch:
        seen = state.digests.get(epoch)
        if seen == digest:
            return state  # an identical re-send: idempotent
        raise ControlLogError(
            f"duplicate epoch {epoch} with different content (state at {state.epoch}); refusing to guess"
        )
    if epoch != state.epoch + 1 and not (
        not state.started and etype == "TABLE_SNAPSHOT" and epoch > state.epoch
    ):
        raise ControlLogError(f"gap in the control log: at epoch {state.epoch}, next event has epoch {epoch}")
    if etype not in CONTROL_TYPES:
        raise ControlLogError(f"epoch {epoch}: unknown control type {etype!r}")

    table = dict(state.table)
    keep = dict(state.keep_probability)
    num_workers = state.num_workers
    if etype == "ROUTING_UPDATE":
        for key, worker in body.get("assign", {}).items():
            _check_worker(state, key, int(worker), num_workers)
            table[key] = int(worker)
        for key in body.get("unassign", []):
            table.pop(key, None)
    elif etype == "TABLE_SNAPSHOT":
        num_workers = int(body["num_workers"])
        table = {k: int(w) for k, w in body.get("table", {}).items()}
        for key, worker in table.items():
            _check_worker(state, key, worker, num_workers)
        keep = {k: float(p) for k, p in body.get("keep_probability", {}).items()}
    elif etype == "SCALE":
        num_workers = int(body["num_workers"])
        bad = {k: w for k, w in table.items() if w >= num_workers}
        if bad:
            raise ControlLogError(
                f"epoch {epoch}: SCALE to {num_workers} leaves table entries out of range: {bad}"
            )
    elif etype == "SHEDDING":
        p = float(body["keep_probability"])
        if not 0.0 <= p <= 1.0:
            raise ControlLogError(f"epoch {epoch}: keep_probability {p} outside [0, 1]")
        keep[str(body["target"])] = p
    # MIGRATION_STEP: an epoch of its own (workers act on it), no routing change for the router.
    if state.max_workers is not None and num_workers > state.max_workers:
        raise ControlLogError(
            f"epoch {epoch}: {num_workers} workers exceed the {state.max_workers} routed partitions"
        )
    digests = dict(state.digests)
    digests[epoch] = digest
    return replace(
        state,
        epoch=epoch,
        num_workers=num_workers,
        table=table,
        keep_probability=keep,
        digests=digests,
        started=True,
    )


def fold(state: ControlState, events: Iterable[Mapping[str, Any]]) -> ControlState:
    for e in events:
        state = apply_event(state, e)
    return state


# --- building events ---------------------------------------------------------------------------------


def make_event(
    epoch: int,
    etype: str,
    body: Mapping[str, Any],
    issuer: str = "ballast-control-cli",
    issued_at: int | None = None,
) -> dict[str, Any]:
    """A ControlEvent dict ready for the codec (payload in fastavro's tuple notation)."""
    if etype not in PAYLOAD_RECORD:
        raise ValueError(f"unknown control type {etype!r}")
    return {
        "epoch": int(epoch),
        "issued_at": int(time.time() * 1000) if issued_at is None else int(issued_at),
        "issuer": issuer,
        "type": etype,
        "payload": (PAYLOAD_RECORD[etype], dict(body)),
    }


def routing_update(
    assign: Mapping[str, int], unassign: Iterable[str] = (), reason: str = ""
) -> tuple[str, dict]:
    return "ROUTING_UPDATE", {
        "assign": {k: int(w) for k, w in assign.items()},
        "unassign": list(unassign),
        "reason": reason,
    }


def table_snapshot(state: ControlState) -> tuple[str, dict]:
    return "TABLE_SNAPSHOT", {
        "num_workers": state.num_workers,
        "table": dict(state.table),
        "keep_probability": dict(state.keep_probability),
    }


def scale(num_workers: int, reason: str = "") -> tuple[str, dict]:
    return "SCALE", {"num_workers": int(num_workers), "reason": reason}


def shedding(target: str, keep_probability: float, reason: str = "") -> tuple[str, dict]:
    return "SHEDDING", {"target": target, "keep_probability": float(keep_probability), "reason": reason}


# --- Kafka I/O ---------------------------------------------------------------------------------------


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
                from confluent_kafka import KafkaError

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
        """Fold everything committed up to now (the last stable offset when called)."""
        from confluent_kafka import TopicPartition

        _low, high = self.consumer.get_watermark_offsets(
            TopicPartition(self.topic, 0), timeout=timeout, cached=False
        )
        events: list[dict[str, Any]] = []
        deadline = time.monotonic() + timeout
        while True:
            position = self.consumer.position([TopicPartition(self.topic, 0)])[0].offset
            if high <= 0 or position >= high:
                break
            if time.monotonic() > deadline:
                raise ControlLogError(
                    f"control topic {self.topic}: could not read to offset {high} in {timeout}s"
                )
            events += self.poll(timeout=0.2)
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
        transactional_id: str = DEFAULT_WRITER_TXN_ID,
        issuer: str = "ballast-control-cli",
    ) -> None:
        from confluent_kafka import Producer

        self.kafka = kafka
        self.topic = topic
        self.initial = initial
        self.issuer = issuer
        self.codec = AvroCodec(CONTROL_SCHEMA)
        self.producer = Producer(kafka.producer(**{"transactional.id": transactional_id}))
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
        deadline = time.monotonic() + timeout
        while reader.state.epoch < self._written_epoch:
            if time.monotonic() > deadline:
                raise ControlLogError(f"own event {self._written_epoch} did not become visible in {timeout}s")
            reader.poll(timeout=0.2)
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
        self.producer.flush(10)
        if self._reader is not None:
            self._reader.close()
