"""The envelope column, whatever version wrote it.

Why: during a rolling upgrade the routed topic holds records, markers and chunks of several
``RoutedEnvelope`` versions (routers and jobs of the old release still write theirs). Read with
the current schema as if it had written every value, an older version's value failed to decode and
became a ``malformed`` dead letter: its markers never advanced the frontier, so no migration
finished until every writer was upgraded.

Each version registered in the :class:`~ballast.avro.codec.SchemaStore` (``ballast/schemas/`` and
``ballast/schemas/previous/``) is recognised by its 10-byte single-object header (magic and fingerprint)
and decoded by ``from_avro`` with its own schema as the writer's and the current one as the
reader's (the ``avroSchema`` option: Avro's own reader/writer resolution, in the JVM, so a field
the writer lacks reads as its default and the column has the current shape whatever the version).
A version added to ``ballast/schemas/previous`` is read with no change here; one the current schema cannot
read is refused when the query is built (:func:`check_readable`), not record by record.

Cost, measured (docs/reduce.md, "Envelope versions"): a record of the current version pays one
comparison of its header per registered version; the decoder of another version runs only for the
records that carry its header (each sits in its own branch of one conditional expression).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ballast.avro.codec import HEADER_LEN, SchemaStore, SchemaVersion, default_store

ENVELOPE = "io.ballast.RoutedEnvelope"


class UnreadableVersion(ValueError):
    """A registered writer version that the current schema cannot read (Avro's resolution fails)."""


def check_readable(versions: Sequence[SchemaVersion]) -> None:
    """Raise :class:`UnreadableVersion` unless the first (current) version reads every other one.

    Why here: Spark's decoder would answer such a version's every record with nulls (a dead letter
    each); a version that cannot be read is a mistake in ``ballast/schemas/previous``, found at the start."""
    import avro.schema
    from avro.compatibility import ReaderWriterCompatibilityChecker, SchemaCompatibilityType

    reader = avro.schema.parse(json.dumps(versions[0].source))
    for v in versions[1:]:
        found = ReaderWriterCompatibilityChecker().get_compatibility(
            reader, avro.schema.parse(json.dumps(v.source))
        )
        if found.compatibility is not SchemaCompatibilityType.compatible:
            kinds = ", ".join(sorted({i.value for i in found.incompatibilities}))
            raise UnreadableVersion(
                f"{v.name} {v.fingerprint:016x} cannot be read as the current version: {kinds} "
                f"({', '.join(sorted(found.messages))} at {', '.join(sorted(found.locations))})"
            )


def with_envelope(frame: Any, value: str = "value", store: SchemaStore | None = None, name: str = ENVELOPE):
    """``frame`` plus two columns: ``header_ok`` (``value`` starts with the header of a registered
    version of ``name``) and ``env`` (the record in the current version's shape; null when the
    header is unknown or the body does not decode with its version's schema)."""
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro

    versions = (store or default_store()).versions(name)
    check_readable(versions)
    reader = json.dumps(versions[0].source)
    header = F.substring(value, 1, HEADER_LEN)
    body = F.expr(f"substring({value}, {HEADER_LEN + 1})")
    decoded = None
    for v in versions:
        options = {"mode": "PERMISSIVE"} if v is versions[0] else {"mode": "PERMISSIVE", "avroSchema": reader}
        branch = from_avro(body, json.dumps(v.source), options)
        is_v = header == F.lit(v.header)
        decoded = F.when(is_v, branch) if decoded is None else decoded.when(is_v, branch)
    known = header.isin(*[F.lit(v.header) for v in versions])
    staged = frame.select("*", known.alias("header_ok"), decoded.alias("_envelope"))
    # from_avro's PERMISSIVE mode answers a body it cannot read with a record of nulls, not a null
    env = F.col("_envelope")
    read = _any_field(env, staged.schema["_envelope"].dataType)
    return staged.select(*frame.columns, "header_ok", F.when(read, env).alias("env"))


def _any_field(column: Any, dtype: Any) -> Any:
    """Whether a decoded record has a field set (a ``RoutedEnvelope`` always has: its one field,
    the body union, is never null)."""
    from functools import reduce

    return reduce(lambda a, b: a | b, [column[f.name].isNotNull() for f in dtype.fields])


def legacy_headers(store: SchemaStore | None = None, name: str = ENVELOPE) -> list[bytes]:
    """The headers of the registered versions whose markers carry no event-time progress (no
    ``event_time`` in ``covers``, envelope v1–v3). Why by the schema and not a version number: a
    version added later keeps the field, and only the field's absence makes a writer *legacy*
    (its input partitions' event time follows its records, spark_jobs.reduce.event_time)."""
    out = []
    for v in (store or default_store()).versions(name):
        if not _covers_have_event_time(v.source):
            out.append(v.header)
    return out


def _covers_have_event_time(schema: Any) -> bool:
    """Whether an envelope schema's ``EpochMarker.covers`` items have an ``event_time`` field."""
    found = False

    def walk(t: Any) -> None:
        nonlocal found
        if isinstance(t, list):
            for x in t:
                walk(x)
        elif isinstance(t, dict):
            if t.get("type") == "record":
                for f in t.get("fields", []):
                    if t.get("name", "").endswith("EpochMarker") and f["name"] == "covers":
                        items = f["type"]["items"] if isinstance(f["type"], dict) else None
                        fields = items.get("fields", []) if isinstance(items, dict) else []
                        found = found or any(g["name"] == "event_time" for g in fields)
                    walk(f["type"])
            elif t.get("type") == "array":
                walk(t["items"])

    walk(schema)
    return found
