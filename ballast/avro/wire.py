"""Hand-rolled Avro binary for the router's hot path: the RoutedEnvelope is *spliced*, not encoded.

Why: fastavro's ``schemaless_writer`` costs ~10 µs per record, more than the whole budget of a
router that must run at ≥70 % of a bare consume→produce loop. ``DataRecord`` starts with exactly the
fields of ``InputEvent`` (key, value, payload, event_time), in the same order and types, so the
binary body of an input event *is* the first part of a DataRecord body. An envelope is therefore::

    header(RoutedEnvelope) | 0x00 (union branch DataRecord) | InputEvent body
      | epoch | router_id | source_topic | source_partition | source_offset

where everything after the body except the offset is constant per (epoch, topic, partition) and is
cached. tests/unit/router/test_wire.py checks that fastavro decodes the result to the same record.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterable, Mapping

from ballast.avro.codec import default_store

_DOUBLE = struct.Struct("<d")

ENVELOPE_HEADER = default_store().current("io.ballast.RoutedEnvelope").header
INPUT_HEADER = default_store().current("io.ballast.InputEvent").header
DATA_PREFIX = ENVELOPE_HEADER + b"\x00"  # union index 0 = DataRecord
MARKER_PREFIX = ENVELOPE_HEADER + b"\x02"  # union index 1 = EpochMarker (zigzag 1 = 0x02)

_SMALL = [bytes([(n << 1) & 0xFF]) for n in range(64)]


class BodyError(ValueError):
    """An InputEvent body that does not parse; ``reason`` matches the codec's DecodeError codes."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def zigzag(n: int) -> bytes:
    """Avro ``long``/``int``: zigzag then base-128 varint, least significant group first."""
    if 0 <= n < 64:
        return _SMALL[n]
    return uvarint((n << 1) ^ (n >> 63))


def avro_string(s: str | bytes) -> bytes:
    raw = s.encode() if isinstance(s, str) else s
    return zigzag(len(raw)) + raw


def read_long(buf: bytes, i: int) -> tuple[int, int]:
    """Decode a zigzag varint at ``i``; returns (value, next index). IndexError when truncated."""
    b = buf[i]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), i + 1
    shift = 0
    z = 0
    while True:
        b = buf[i]
        i += 1
        z |= (b & 0x7F) << shift
        if b < 0x80:
            return (z >> 1) ^ -(z & 1), i
        shift += 7
        if shift > 63:
            raise BodyError("malformed", "varint longer than 10 bytes")


def scan_input_body(v: bytes) -> bytes:
    """Validate an InputEvent body (after the 10-byte header) and return the key bytes
    (:func:`scan_input_event` says how)."""
    return scan_input_event(v)[0]


def scan_input_event(v: bytes) -> tuple[bytes, int]:
    """Validate an InputEvent body (after the 10-byte header); return the key bytes and where the
    event time's varint starts (it runs to the end: :func:`read_event_time`).

    Checks the structure exactly (lengths, no trailing bytes) without building Python objects for
    the payload; UTF-8 validity of the key is checked by the caller once per distinct key. The
    common shapes (key < 64 bytes, payload < 8 KiB) take a branch-light path: this function runs
    once per record.

    Two value checks, as cheap as the structure checks (decision in docs/router.md, "Input
    formats"): the double must be finite (``bad-field``: exponent bits all ones is NaN or
    infinity, which would poison every aggregate it enters; one byte compared per record) and the
    event time must fit a long (``malformed``: a 10-byte varint may carry at most one bit in its
    last byte; checked inside the tail regex, so at no cost).
    """
    try:
        b = v[10]
        if b < 0x80 and not b & 1:
            i = 11 + (b >> 1)
            key = v[11:i]
        else:
            klen, j = read_long(v, 10)
            if klen < 0:
                raise BodyError("malformed", "negative key length")
            i = j + klen
            key = v[j:i]
        i += 8  # value: double, little-endian: v[i - 1] holds the sign and the exponent's top 7 bits
        if v[i - 1] | 0x80 == 0xFF and v[i - 2] >= 0xF0:
            raise BodyError("bad-field", "value is not finite (NaN or infinity)")
        b = v[i]
        if b < 0x80:
            if b & 1:
                raise BodyError("malformed", "negative payload length")
            i += 1 + (b >> 1)
        else:
            c = v[i + 1]
            if c < 0x80:
                z = (b & 0x7F) | (c << 7)
                if z & 1:
                    raise BodyError("malformed", "negative payload length")
                i += 2 + (z >> 1)
            else:
                plen, i = read_long(v, i)
                if plen < 0:
                    raise BodyError("malformed", "negative payload length")
                i += plen
    except IndexError:
        raise BodyError("truncated", f"body ends early ({len(v)} bytes)") from None
    # what is left must be exactly one varint (event_time) that fits a long
    m = _VARINT_TAIL(v, i)
    if m is None:
        rest = v[i:]
        if not rest or all(x & 0x80 for x in rest):
            raise BodyError("truncated", f"body ends early ({len(v)} bytes)")
        if len(rest) == 10 and all(x & 0x80 for x in rest[:9]):
            raise BodyError("malformed", f"event_time does not fit a long (varint ends in {rest[9]:#04x})")
        raise BodyError("trailing-bytes", "bytes left after the record")
    return key, i


def read_event_time(v: bytes, i: int) -> int:
    """The zigzag varint from ``v[i]`` to the end (an event time :func:`scan_input_event` found)."""
    z = shift = 0
    for b in v[i:]:
        z |= (b & 0x7F) << shift
        shift += 7
    return (z >> 1) ^ -(z & 1)


def varint6_key(event_time_ms: int) -> int:
    """The order key of an event time whose varint is 6 bytes (1970 + 199 days up to 2039): its
    bytes as a little-endian int. Among 6-byte varints of non-negative times this order is the
    times' order (the continuation bits are the same in all), so the router's hot path compares
    and keeps maxima without decoding; -1 when the time's varint is not 6 bytes."""
    z = zigzag(event_time_ms)
    return int.from_bytes(z, "little") if len(z) == 6 and event_time_ms >= 0 else -1


def from_varint6_key(key: int) -> int:
    """The event time behind :func:`varint6_key`."""
    return read_event_time(key.to_bytes(6, "little"), 0)


# a varint of up to 9 bytes, or of 10 whose last byte holds the 64th bit only (zigzag of a long)
_VARINT_TAIL = re.compile(rb"[\x80-\xff]{0,8}[\x00-\x7f]|[\x80-\xff]{9}[\x00\x01]", re.DOTALL).fullmatch


def uvarint(z: int) -> bytes:
    """Unsigned base-128 varint (the second half of an Avro long, after zigzag)."""
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


# low 14 bits of a varint of at least 3 bytes, both with the continuation bit (router hot path)
LOW14 = [bytes(((z & 0x7F) | 0x80, ((z >> 7) & 0x7F) | 0x80)) for z in range(1 << 14)]


def encode_input_body(key: str | bytes, value: float, payload: bytes, event_time: int) -> bytes:
    """InputEvent body (no header) from its fields: for JSON / string inputs."""
    return avro_string(key) + _DOUBLE.pack(value) + avro_string(payload) + zigzag(event_time)


def data_suffix(epoch: int, router_id: str, source_topic: str, source_partition: int) -> bytes:
    """The constant part after the body: epoch, router_id, source_topic, source_partition."""
    return zigzag(epoch) + avro_string(router_id) + avro_string(source_topic) + zigzag(source_partition)


def covers_field(
    covers: Iterable[tuple[str, int]], event_times: Mapping[tuple[str, int], int] | None = None
) -> bytes:
    """``EpochMarker.covers``: an Avro array (one block) of (topic, partition, event_time) records;
    ``event_times`` gives a partition's highest event time read (absent: null, none read yet)."""
    items = sorted(covers)
    if not items:
        return b"\x00"
    times = event_times or {}
    parts = []
    for topic, partition in items:
        t = times.get((topic, partition))
        parts.append(avro_string(topic) + zigzag(partition) + (b"\x00" if t is None else b"\x02" + zigzag(t)))
    return zigzag(len(items)) + b"".join(parts) + b"\x00"


def shed_field(spans: Iterable[tuple[str, int, int, float]] = ()) -> bytes:
    """``EpochMarker.shed``: an Avro array (one block) of (topic, first, last, keep) spans."""
    items = list(spans)
    if not items:
        return b"\x00"
    body = b"".join(
        avro_string(topic) + zigzag(first) + zigzag(last) + _DOUBLE.pack(keep)
        for topic, first, last, keep in items
    )
    return zigzag(len(items)) + body + b"\x00"


def epoch_marker(
    epoch: int,
    router_id: str,
    worker: int,
    marker_time_ms: int,
    covers: bytes = b"\x00",
    shed: bytes = b"\x00",
) -> bytes:
    """An EpochMarker envelope; ``covers`` is :func:`covers_field` (computed once per marker set),
    ``shed`` is :func:`shed_field` (this routed partition's own)."""
    return (
        MARKER_PREFIX
        + zigzag(epoch)
        + avro_string(router_id)
        + zigzag(worker)
        + zigzag(marker_time_ms)
        + covers
        + shed
    )
