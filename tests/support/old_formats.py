"""Bytes as an older version of Ballast wrote them, built here from their documented layout (not
by the code under test): state a checkpoint saved, or a chunk in flight, before a change; routed
envelopes encoded with the schema file of the release that wrote them."""

from __future__ import annotations

import json
import struct
from typing import Any

import numpy as np

from ballast.avro.codec import AvroCodec, SchemaStore, SchemaVersion
from ballast.paths import SCHEMAS_DIR


def table_v1(keys: list[str], run: list[int], window: list[int], columns: list[tuple[str, list]]) -> bytes:
    """A state table in the first format (``BT1``): magic, row count, keys (int32 lengths, then
    UTF-8), run, window, then every column of the schema of its day, raw little-endian, in schema
    order (``columns``: (dtype, values) each)."""
    encoded = [k.encode() for k in keys]
    parts = [b"BT1", struct.pack("<I", len(keys)), np.array([len(k) for k in encoded], "<i4").tobytes()]
    parts += [b"".join(encoded), np.array(run, "<i8").tobytes(), np.array(window, "<i8").tobytes()]
    parts += [np.array(values, dtype).tobytes() for dtype, values in columns]
    return b"".join(parts)


def aggregate_rows_v1(
    keys: list[str], windows: list[int], count: list[int], total: list[float], low: list[float],
    high: list[float],
) -> bytes:  # fmt: skip
    """An ``aggregate`` state table before the sampling columns: count, sum, min, max, then the
    engine's excluded, dirty, revision (run 0, dirty, never emitted)."""
    n = len(keys)
    return table_v1(
        keys,
        [0] * n,
        windows,
        [
            ("<i8", count),
            ("<f8", total),
            ("<f8", low),
            ("<f8", high),
            ("<i8", [0] * n),  # excluded
            ("<i1", [1] * n),  # dirty
            ("<i4", [-1] * n),  # revision
        ],
    )


# --- RoutedEnvelope values of every released version ----------------------------------------------

# every release's version: those kept in ballast/schemas/previous/, then the current one (ballast/schemas/)
_PREVIOUS = sorted(
    int(p.stem.rpartition(".v")[2]) for p in (SCHEMAS_DIR / "previous").glob("routed_envelope.v*.avsc")
)
ENVELOPE_VERSIONS = (*_PREVIOUS, _PREVIOUS[-1] + 1)


def envelope_schema(version: int) -> dict[str, Any]:
    """The schema file of a ``RoutedEnvelope`` version as it was released."""
    if version == ENVELOPE_VERSIONS[-1]:
        return json.loads((SCHEMAS_DIR / "routed_envelope.avsc").read_text())
    return json.loads((SCHEMAS_DIR / "previous" / f"routed_envelope.v{version}.avsc").read_text())


def envelope_codec(version: int) -> AvroCodec:
    """A codec that writes ``version`` (its own header, its own fields), as a router or job of that
    release did."""
    schema = SchemaVersion.from_json(envelope_schema(version))
    return AvroCodec(schema, SchemaStore([schema]))


def _fit(value: Any, node: Any) -> Any:
    """``value`` with only the fields ``node`` (a record schema, or a list of them) has."""
    if isinstance(node, dict) and node.get("type") == "record":
        return {f["name"]: _fit(value[f["name"]], f["type"]) for f in node["fields"]}
    if isinstance(node, dict) and node.get("type") == "array":
        return [_fit(v, node["items"]) for v in value]
    return value


def _branch(version: int, name: str) -> dict[str, Any]:
    (body,) = envelope_schema(version)["fields"]
    return next(b for b in body["type"] if b["name"] == name)


def envelope_value(version: int, branch: str, fields: dict[str, Any]) -> bytes:
    """One envelope of ``version``: ``branch`` (``DataRecord``, ``EpochMarker``, ``StateChunk``)
    with ``fields`` as the current version names them; fields the version did not have are left
    out (a v1 marker covers nothing, a v1 or v2 chunk names no job, a v2 or v3 marker's covered
    partitions state no event time)."""
    fitted = _fit(fields, _branch(version, branch))
    return envelope_codec(version).encode({"body": (f"io.ballast.{branch}", fitted)})
