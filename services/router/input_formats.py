"""Input formats → (routing key, InputEvent body), or a typed error for the dead-letter topic.

Why bodies: whatever the input format, the routed record carries an Avro InputEvent body (key,
value, payload, event_time) spliced into a RoutedEnvelope (see :mod:`ballast.avro.wire`), so
workers read one format. Formats:

* ``avro``   Ballast InputEvent in single-object encoding. The current schema version takes the
  router's fast path (structural scan, no decode); older registered versions are decoded with
  schema resolution and re-encoded.
* ``json``   a JSON object (what Kafka Connect's JsonConverter writes with schemas.enable=false), or
  the Connect envelope ``{"schema": ..., "payload": {...}}`` (schemas.enable=true). The key is
  ``payload[key_field]``; ``value_field`` and ``time_field`` are optional (1.0 / record timestamp);
  the payload bytes are the original JSON document, so workers can read any other field.
* ``string`` UTF-8 text (StringConverter). The key is the Kafka key; with ``string_key="value"`` a
  record without a Kafka key uses the text itself (word-count style).
* ``auto``   per record: Avro magic ``C3 01`` → avro; ``{`` → json; otherwise string.

Whatever the format, a routed event's value is a finite double and its event time fits an Avro
long; anything else is ``bad-field`` (the current Avro version's scan checks the same, see
:func:`~ballast.avro.wire.scan_input_body`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ballast.avro.codec import HEADER_LEN, MAGIC, AvroCodec, DecodeError
from ballast.avro.wire import INPUT_HEADER, BodyError, encode_input_body, scan_input_body
from ballast.routing.table import InvalidKeyError, check_key

FORMATS = ("auto", "avro", "json", "string")
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1  # Avro long (event_time is timestamp-millis)


class InputError(ValueError):
    """A record the router cannot read; ``reason`` is the dead-letter header value.

    An unroutable *key* is :class:`~ballast.routing.table.InvalidKeyError` instead (the one key
    validation, :func:`~ballast.routing.table.check_key`); both carry ``reason`` and ``detail``.
    """

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


# what InputParser.parse raises for a record that goes to the dead-letter topic
RECORD_ERRORS = (InputError, InvalidKeyError)


@dataclass(frozen=True)
class FormatOptions:
    fmt: str = "auto"
    key_field: str = "key"
    value_field: str = "value"
    time_field: str = "event_time"
    string_key: str = "kafka"  # or "value"
    # a larger input value is refused before parsing (oversize); 0: no limit. The router passes its
    # record limit: an envelope is always larger than the input value it carries
    max_record_bytes: int = 0

    def __post_init__(self) -> None:
        if self.fmt not in FORMATS:
            raise ValueError(f"input format must be one of {FORMATS}, got {self.fmt!r}")
        if self.string_key not in ("kafka", "value"):
            raise ValueError("string_key must be 'kafka' or 'value'")


class InputParser:
    """The slow (general) path; the router's loop handles current-version Avro inline."""

    def __init__(self, options: FormatOptions) -> None:
        self.o = options
        self.avro = AvroCodec("io.ballast.InputEvent")

    def parse(self, value: bytes | None, kafka_key: bytes | None, timestamp_ms: int) -> tuple[bytes, bytes]:
        """(key bytes, InputEvent body) for one record, or raise :class:`InputError` /
        :class:`~ballast.routing.table.InvalidKeyError` (see :data:`RECORD_ERRORS`)."""
        o = self.o
        if value is None:
            raise InputError("null-value", "tombstone / null value")
        if o.max_record_bytes and len(value) > o.max_record_bytes:
            raise InputError("oversize", f"{len(value)} bytes > max {o.max_record_bytes}")
        fmt = o.fmt
        if fmt == "auto":
            if value[:2] == MAGIC:
                fmt = "avro"
            elif value.lstrip()[:1] == b"{":
                fmt = "json"
            else:
                fmt = "string"
        if fmt == "avro":
            return self._avro(value)
        if fmt == "json":
            return self._json(value, kafka_key, timestamp_ms)
        return self._string(value, kafka_key, timestamp_ms)

    def _avro(self, value: bytes) -> tuple[bytes, bytes]:
        if value[:HEADER_LEN] == INPUT_HEADER:
            try:
                key = scan_input_body(value)
            except BodyError as exc:
                raise InputError(exc.reason, exc.detail) from None
            return check_key(key), value[HEADER_LEN:]
        try:
            rec = self.avro.decode(value)
        except DecodeError as exc:
            raise InputError(exc.reason, exc.detail) from None
        key = check_key(rec["key"].encode("utf-8", "surrogatepass"))
        value, et = _number(rec["value"], "value"), _event_time(rec["event_time"], "event_time")
        return key, encode_input_body(key, value, rec["payload"], et)

    def _json(self, value: bytes, kafka_key: bytes | None, ts: int) -> tuple[bytes, bytes]:
        try:
            doc = json.loads(value)
        except (ValueError, UnicodeDecodeError) as exc:
            raise InputError("bad-json", str(exc)[:200]) from None
        if isinstance(doc, Mapping) and "payload" in doc and "schema" in doc:
            doc = doc["payload"]  # Connect JsonConverter with schemas.enable=true
        if isinstance(doc, str):
            # a JSON escape can carry a lone surrogate: _string then refuses the text as not UTF-8
            return self._string(doc.encode("utf-8", "surrogatepass"), kafka_key, ts)
        if not isinstance(doc, Mapping):
            raise InputError("bad-json", f"expected an object, got {type(doc).__name__}")
        o = self.o
        raw_key = doc.get(o.key_field)
        if raw_key is None or raw_key == "":
            raise InputError("missing-key", f"field {o.key_field!r} absent or empty")
        text = raw_key if isinstance(raw_key, str) else json.dumps(raw_key, sort_keys=True)
        # a JSON escape can carry a lone surrogate, which has no UTF-8 form: check_key rejects it
        key = check_key(text.encode("utf-8", "surrogatepass"))
        val = _number(doc.get(o.value_field, 1.0), o.value_field)
        et = _event_time(doc.get(o.time_field, ts), o.time_field)
        return key, encode_input_body(key, val, value, et)

    def _string(self, value: bytes, kafka_key: bytes | None, ts: int) -> tuple[bytes, bytes]:
        try:
            text = value.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError("malformed", f"not UTF-8: {exc}") from None
        key = kafka_key
        if not key and self.o.string_key == "value":
            key = text.strip().encode()
        if not key:
            raise InputError("missing-key", "no Kafka key (and --string-key=kafka)")
        check_key(key)
        return key, encode_input_body(key, 1.0, value, ts)


def _number(x: Any, name: str) -> float:
    """A finite double: an integer beyond the double range, ``1e400`` (inf) and the NaN / Infinity
    tokens Python's json accepts are refused (one of them would poison every aggregate it enters)."""
    if isinstance(x, bool) or not isinstance(x, int | float):
        raise InputError("bad-field", f"{name} must be a number, got {x!r}"[:200])
    try:
        f = float(x)
    except OverflowError:
        raise InputError("bad-field", f"{name} does not fit a double ({len(str(x))}-digit integer)") from None
    if not math.isfinite(f):
        raise InputError("bad-field", f"{name} must be finite, got {f}")
    return f


def _event_time(x: Any, name: str) -> int:
    """Integer milliseconds in the Avro long range (a larger one encodes to a varint Java cannot read)."""
    if isinstance(x, bool) or not isinstance(x, int):
        raise InputError("bad-field", f"{name} must be integer ms, got {x!r}"[:200])
    if not LONG_MIN <= x <= LONG_MAX:
        raise InputError("bad-field", f"{name} {x} does not fit a long"[:200])
    return x
