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
from ballast.avro.wire import covers_field, data_suffix, epoch_marker, shed_field, zigzag
from ballast.kafka.configuration import LIBRDKAFKA_MESSAGE_MAX_BYTES
from ballast.kafka.dead_letters import DLQ_HEADERS
from ballast.kafka.topics import TopicLayout
from services.router.progress import EventProgress

DETAIL_MAX_BYTES = 1000

# Every record the router writes (key + value + headers) stays this far below the producer's
# message.max.bytes: librdkafka adds its per-record framing (36 bytes in librdkafka 2.x) before
# comparing, and the margin leaves room for that to grow. The broker's own limit, a topic's
# max.message.bytes (default 1048588), is larger than a batch holding one such record.
PRODUCE_MARGIN = 512


def splice_bound(max_bytes: int, router_id: str) -> int:
    """The largest current-version Avro input value whose envelope and key cannot exceed ``max_bytes``.

    The router's hot path takes only such values, so it never measures what it produces. The
    envelope is ``DATA_PREFIX (11) + value - 10-byte header + suffix + offset varint (<= 10)`` and
    the Kafka key is the body's key, at most ``len(value) - 21`` bytes (header, key length, double,
    payload length, event time), so both together are at most ``2 len(value) + suffix - 10`` bytes;
    the suffix is taken at its widest (10-byte epoch, 249-character topic, 5-byte partition).
    Larger values go to the general path, which checks the exact size.
    """
    widest = len(data_suffix(2**63 - 1, router_id, "t" * 249, 2**31 - 1))
    return max(0, (max_bytes - widest) // 2)


def _headers_size(headers: list[tuple[str, bytes]]) -> int:
    """Bytes the headers take in a Kafka record (zigzag varint lengths, then the bytes)."""
    return sum(len(zigzag(len(n))) + len(n) + len(zigzag(len(v))) + len(v) for n, v in headers)


def _length(data: bytes | None) -> bytes:
    """A header value for a key or value length; -1 for null, as Kafka's record format writes it."""
    return b"-1" if data is None else str(len(data)).encode()


class EnvelopeWriter:
    """The producer-facing side of one router: envelopes, markers, dead letters, metrics records."""

    def __init__(
        self,
        producer: Producer,
        topics: TopicLayout,
        router_id: str,
        routed_partitions: int,
        max_bytes: int = LIBRDKAFKA_MESSAGE_MAX_BYTES - PRODUCE_MARGIN,
    ) -> None:
        self.producer = producer
        self.max_bytes = max_bytes  # a dead letter (key + value + headers) is cut to fit
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

    def write_markers(
        self, now_ms: int, covers: Iterable[tuple[str, int]], progress: EventProgress | None = None
    ) -> int:
        """The current epoch's marker, covering ``covers`` (the input partitions this router owns),
        in **every** routed partition; returns how many were written (0: nothing owned).

        With ``progress``, each marker also says how far each covered partition has come in event
        time, and the spans shed for its routed partition since the last marker there (taken from
        ``progress``): every marker does, so the spans of records routed under an epoch precede
        the next epoch's marker (a worker ships a moved key's state with what it knows was shed)."""
        self.markers_due = False
        owned = sorted(covers)
        if not owned:
            return 0  # speaks for no input partition: says nothing
        rid = self.router_id
        topic = self.routed_topic
        said = progress.event_times(owned) if progress is not None else {}
        field = covers_field(owned, said)
        for w in range(self.routed_partitions):
            shed = shed_field(progress.spans_for(w)) if progress is not None else b"\x00"
            self.produce(topic, epoch_marker(self.epoch, rid, w, now_ms, field, shed), partition=w)
        if progress is not None:
            progress.written(said)
        return self.routed_partitions

    # --- dead letters and statistics --------------------------------------------------------------

    def dead_letter(self, m: Message, reason: str, detail: str, error_class: str) -> None:
        """Original key and value, unchanged; the why and where in headers (same transaction).

        ``error_class`` names the exception that rejected the record (the typed ``InputError``,
        ``BodyError``, ``InvalidKeyError``, or whatever else parsing raised). A record the
        producer could not write whole (key + value + headers over :attr:`max_bytes`) is cut: the
        larger of key and value gives way, neither keeps less than half the room unless it is
        shorter; ``ballast.source.bytes`` / ``.key.bytes`` keep the original lengths, so a
        consumer sees what was cut.
        """
        value, key = m.value(), m.key()
        text = detail.encode("utf-8", "replace")[:DETAIL_MAX_BYTES]
        values = (
            reason.encode(),
            text.decode("utf-8", "ignore").encode(),  # not cut inside a character
            m.topic().encode(),
            str(m.partition()).encode(),
            str(m.offset()).encode(),
            self.router_id.encode(),
            error_class.encode(),
            _length(value),
            _length(key),
        )
        headers = list(zip(DLQ_HEADERS, values, strict=True))
        room = self.max_bytes - _headers_size(headers)
        vlen, klen = len(value or b""), len(key or b"")
        if vlen + klen > room:  # each keeps at least half the room, or all of itself if smaller
            half = room // 2
            vlen, klen = (room - klen, klen) if klen <= half else (min(vlen, half), room - min(vlen, half))
            value = None if value is None else value[:vlen]
            key = None if key is None else key[:klen]
        self.produce(self.dead_letter_topic, value, key, headers=headers)

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
