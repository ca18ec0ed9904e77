"""EnvelopeWriter: everything the router writes, as bytes, to the producer.

Why one writer: the routed topic's contract (docs/router.md, "Marker protocol") is about what goes
into it and in which order: spliced ``DataRecord`` envelopes, ``EpochMarker`` s in every routed
partition before the first record of a new epoch, dead letters with a fixed header set, and the
interval key statistics. Keeping the encodings and the pending markers in one object keeps that
contract in one file; the loop only decides *when*.

The data-record path is split: the per-(epoch, topic, partition) suffix cache lives here, but the
loop splices and produces the records itself (inlined, it is the hot path); it calls
:meth:`produce` only when the local queue is full.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from confluent_kafka import Message, Producer

from ballast.avro.codec import AvroCodec
from ballast.avro.wire import covers_field, data_suffix, epoch_marker
from ballast.kafka.topics import TopicLayout

DLQ_HEADERS = (
    "ballast.error.reason",
    "ballast.error.detail",
    "ballast.source.topic",
    "ballast.source.partition",
    "ballast.source.offset",
    "ballast.router.id",
)


class EnvelopeWriter:
    """The producer-facing side of one router: envelopes, markers, dead letters, metrics records."""

    def __init__(
        self, producer: Producer, topics: TopicLayout, router_id: str, routed_partitions: int
    ) -> None:
        self.producer = producer
        self.router_id = router_id
        self.routed_topic = topics.name("routed")
        self.dead_letter_topic = topics.name("dead_letter")
        self.metrics_topic = topics.name("metrics")
        self.routed_partitions = routed_partitions
        self.epoch = 0
        # (source topic, source partition) -> envelope bytes after the body, minus the offset;
        # cleared in place on a new epoch (the loop binds its ``get`` once per batch)
        self.suffixes: dict[tuple[str, int], bytes] = {}
        # a marker of the current epoch is owed before the next record (new epoch, new partitions,
        # an aborted transaction that took the last one with it)
        self.markers_due = False
        self._metrics_codec = AvroCodec("io.ballast.MetricsRecord")
        self._metrics_key = router_id.encode()

    # --- epochs and markers -----------------------------------------------------------------------

    def set_epoch(self, epoch: int) -> None:
        """Records from now on carry ``epoch`` (the cached suffixes encode the old one)."""
        self.epoch = epoch
        self.suffixes.clear()

    def suffix(self, topic: str, partition: int) -> bytes:
        """The constant tail of a data envelope from ``topic``/``partition`` at the current epoch."""
        s = data_suffix(self.epoch, self.router_id, topic, partition)
        self.suffixes[(topic, partition)] = s
        return s

    def queue_markers(self) -> None:
        """Owe a marker of the current epoch, written before the next record.

        One marker suffices however many epochs were folded since the last one: markers are
        cumulative (marker e ends every epoch < e for the partitions it covers), which is also
        why a marker lost with an aborted transaction is repaired by simply owing it again.
        """
        self.markers_due = True

    def write_markers(self, now_ms: int, covers: Iterable[tuple[str, int]]) -> int:
        """The current epoch's marker, covering ``covers`` (the input partitions this router owns),
        in **every** routed partition; returns how many were written (0: nothing owned)."""
        self.markers_due = False
        owned = list(covers)
        if not owned:
            return 0  # speaks for no input partition: says nothing
        rid = self.router_id
        topic = self.routed_topic
        field = covers_field(owned)
        for w in range(self.routed_partitions):
            self.produce(topic, epoch_marker(self.epoch, rid, w, now_ms, field), partition=w)
        return self.routed_partitions

    # --- dead letters and statistics --------------------------------------------------------------

    def dead_letter(self, m: Message, reason: str, detail: str) -> None:
        """Original key and value, unchanged; the why and where in headers (same transaction)."""
        values = (
            reason.encode(),
            detail[:1000].encode("utf-8", "replace"),
            m.topic().encode(),
            str(m.partition()).encode(),
            str(m.offset()).encode(),
            self.router_id.encode(),
        )
        headers = list(zip(DLQ_HEADERS, values, strict=True))
        self.produce(self.dead_letter_topic, m.value(), m.key(), headers=headers)

    def metrics_record(self, record: dict[str, Any]) -> None:
        """One MetricsRecord (key = router id) on the metrics topic."""
        self.produce(self.metrics_topic, self._metrics_codec.encode(record), self._metrics_key)

    # --- the producer -----------------------------------------------------------------------------

    def produce(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        partition: int | None = None,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> None:
        """Produce, waiting (serving delivery reports) while librdkafka's local queue is full."""
        kwargs: dict[str, Any] = {}
        if partition is not None:
            kwargs["partition"] = partition
        if headers is not None:
            kwargs["headers"] = headers
        while True:
            try:
                self.producer.produce(topic, value, key, **kwargs)
                return
            except BufferError:
                self.producer.poll(0.05)
