"""Avro codec: binary Avro in the Avro spec's single-object encoding, with schema resolution.

Wire format (Avro 1.12 spec, "Single-object encoding")::

    C3 01 | 8-byte little-endian CRC-64-AVRO fingerprint of the writer schema's Parsing Canonical Form
          | Avro binary body

Why this and not a registry: a consumer finds the writer schema from the 10-byte header alone,
without a schema-registry server; every Ballast process ships the schemas it may meet (``ballast/schemas/``
plus any older versions registered in the :class:`SchemaStore`), and decodes with Avro's
reader/writer resolution, so fields can be added with defaults without breaking old readers.

Why fastavro on the hot path: it is the fastest conformant Python implementation we measured
(``make bench-codec``); the reference ``avro`` library and Spark's ``from_avro`` decode the same bytes
(tests/integration/test_codec_conformance.py).

Decision: logical types are stripped before fastavro parses a schema, so ``timestamp-millis`` fields
are plain ``long`` milliseconds in Python (no datetime objects on the hot path). Parsing Canonical
Form drops logical types anyway, so fingerprints, and Spark's view of the schema files, are unchanged.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fastavro
from fastavro.schema import fingerprint, to_parsing_canonical_form

from ballast.paths import SCHEMAS_DIR

MAGIC = b"\xc3\x01"
HEADER_LEN = 10

def crc64_avro_fingerprint(canonical_form: str) -> int:
    """CRC-64-AVRO (Rabin) of a Parsing Canonical Form, as the little-endian int the header carries.

    fastavro computes it (and prints it as the 8 little-endian bytes in hex); we keep the int form
    so a header is ``MAGIC + fingerprint.to_bytes(8, "little")``.
    """
    return int.from_bytes(bytes.fromhex(fingerprint(canonical_form, "CRC-64-AVRO")), "little")


# --- errors --------------------------------------------------------------------------------------


class CodecError(ValueError):
    """Base class of everything the codec raises."""


class EncodeError(CodecError):
    """A record does not match the schema it is written with."""


class DecodeError(CodecError):
    """Bytes that cannot be decoded, with where they came from and why.

    ``reason`` is a short stable code (``truncated``, ``bad-magic``, ``unknown-schema``, ``malformed``,
    ``trailing-bytes``, ``incompatible-schema``) that services put in dead-letter headers; ``detail`` is
    the human-readable explanation.
    """

    def __init__(
        self,
        reason: str,
        detail: str,
        topic: str | None = None,
        partition: int | None = None,
        offset: int | None = None,
    ) -> None:
        self.reason = reason
        self.detail = detail
        self.topic = topic
        self.partition = partition
        self.offset = offset
        where = f"{topic}[{partition}]@{offset}" if topic is not None else "<bytes>"
        super().__init__(f"cannot decode {where}: {reason}: {detail}")


# --- schemas ------------------------------------------------------------------------------------------


def _strip_logical_types(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _strip_logical_types(v) for k, v in node.items() if k != "logicalType"}
    if isinstance(node, list):
        return [_strip_logical_types(v) for v in node]
    return node


@dataclass(frozen=True)
class SchemaVersion:
    """One parsed schema with its identity on the wire."""

    name: str
    source: Mapping[str, Any] | str
    parsed: Any
    canonical_form: str
    fingerprint: int

    @property
    def header(self) -> bytes:
        return MAGIC + self.fingerprint.to_bytes(8, "little")

    @classmethod
    def from_json(cls, schema: Mapping[str, Any] | str) -> SchemaVersion:
        parsed = fastavro.parse_schema(_strip_logical_types(schema), _write_hint=False)
        canonical = to_parsing_canonical_form(parsed)
        name = parsed.get("name", str(parsed)) if isinstance(parsed, dict) else str(parsed)
        return cls(
            name=name,
            source=schema,
            parsed=parsed,
            canonical_form=canonical,
            fingerprint=crc64_avro_fingerprint(canonical),
        )


class SchemaStore:
    """Every writer schema a process can decode, by fingerprint, and the current one by name."""

    def __init__(self, schemas: Iterable[SchemaVersion] = ()) -> None:
        self._by_fingerprint: dict[int, SchemaVersion] = {}
        self._current: dict[str, SchemaVersion] = {}
        for s in schemas:
            self.register(s)

    def register(self, schema: SchemaVersion | Mapping[str, Any], current: bool = True) -> SchemaVersion:
        """Add a schema; ``current=False`` adds an older writer version without making it the default."""
        version = schema if isinstance(schema, SchemaVersion) else SchemaVersion.from_json(schema)
        self._by_fingerprint[version.fingerprint] = version
        if current or version.name not in self._current:
            self._current[version.name] = version
        return version

    @classmethod
    def from_dir(cls, folder: Path = SCHEMAS_DIR) -> SchemaStore:
        """The current schemas (``*.avsc``) and the older writer versions in ``previous/``.

        Why keep older versions: a record carries its writer schema's fingerprint, so records
        written before a field was added decode only if that version is still registered.
        """
        store = cls()
        files = sorted(folder.glob("*.avsc"))
        if not files:
            raise FileNotFoundError(f"no .avsc files in {folder}")
        for f in files:
            store.register(json.loads(f.read_text()))
        for f in sorted((folder / "previous").glob("*.avsc")):
            store.register(json.loads(f.read_text()), current=False)
        return store

    def by_fingerprint(self, fingerprint: int) -> SchemaVersion | None:
        return self._by_fingerprint.get(fingerprint)

    def versions(self, name: str) -> list[SchemaVersion]:
        """Every registered writer version of ``name``, the current one first: what a reader that
        cannot resolve by itself (Spark's ``from_avro``) must know to read all of them."""
        current = self.current(name)
        return [current, *(v for v in self._by_fingerprint.values() if v.name == name and v is not current)]

    def current(self, name: str) -> SchemaVersion:
        try:
            return self._current[name]
        except KeyError:
            raise KeyError(f"no schema named {name}; known: {sorted(self._current)}") from None

    def names(self) -> list[str]:
        return sorted(self._current)


_DEFAULT_STORE: SchemaStore | None = None


def default_store() -> SchemaStore:
    """The schemas shipped in ``ballast/schemas/`` (loaded once per process)."""
    global _DEFAULT_STORE
    if _DEFAULT_STORE is None:
        _DEFAULT_STORE = SchemaStore.from_dir()
    return _DEFAULT_STORE


# --- the codec --------------------------------------------------------------------------------------


class AvroCodec:
    """Encode records with one (reader/writer) schema; decode any registered writer version.

    Unions of records use fastavro's tuple notation on both sides: ``("io.ballast.DataRecord", {...})``,
    so a consumer always knows which branch it holds.
    """

    def __init__(self, schema: SchemaVersion | str, store: SchemaStore | None = None) -> None:
        self.store = store or default_store()
        self.schema = self.store.current(schema) if isinstance(schema, str) else schema
        self._header = self.schema.header
        self._buffer = io.BytesIO()

    def encode(self, record: Mapping[str, Any]) -> bytes:
        buf = self._buffer
        buf.seek(0)
        buf.truncate()
        buf.write(self._header)
        try:
            fastavro.schemaless_writer(buf, self.schema.parsed, record)
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as exc:
            raise EncodeError(f"record does not fit {self.schema.name}: {exc}") from exc
        return buf.getvalue()

    def decode(
        self,
        data: bytes | None,
        topic: str | None = None,
        partition: int | None = None,
        offset: int | None = None,
    ) -> Any:
        """Decode one value; any failure is a :class:`DecodeError` naming where and why."""

        def fail(reason: str, detail: str) -> DecodeError:
            return DecodeError(reason, detail, topic, partition, offset)

        if data is None:
            raise fail("truncated", "null value (tombstone), expected an Avro record")
        if len(data) < HEADER_LEN:
            raise fail(
                "truncated", f"{len(data)} bytes, shorter than the {HEADER_LEN}-byte single-object header"
            )
        if data[:2] != MAGIC:
            raise fail(
                "bad-magic", f"starts with {data[:2].hex()}, expected c301 (Avro single-object encoding)"
            )
        fingerprint = int.from_bytes(data[2:HEADER_LEN], "little")
        writer = self.store.by_fingerprint(fingerprint)
        if writer is None:
            raise fail("unknown-schema", f"writer schema fingerprint {fingerprint:016x} is not registered")
        body = io.BytesIO(data)
        body.seek(HEADER_LEN)
        reader = None if writer is self.schema else self.schema.parsed
        try:
            record = fastavro.schemaless_reader(body, writer.parsed, reader, return_record_name=True)
        except fastavro.read.SchemaResolutionError as exc:
            raise fail(
                "incompatible-schema", f"{writer.name} cannot be read as {self.schema.name}: {exc}"
            ) from exc
        except (EOFError, StopIteration) as exc:
            raise fail("truncated", f"body ends early ({len(data)} bytes): {exc!r}") from exc
        except Exception as exc:  # fastavro raises many types on garbage (ValueError, IndexError, ...)
            raise fail("malformed", f"{type(exc).__name__}: {exc}") from exc
        rest = len(data) - body.tell()
        if rest:
            raise fail("trailing-bytes", f"{rest} bytes left after the record")
        return record
