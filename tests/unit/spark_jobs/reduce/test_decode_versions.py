"""Every writer version a Ballast reader may meet is readable as the current version, and the
reduce refuses, before Spark decodes anything, a registered version that is not
(spark_jobs/reduce/decode.py). The judge is the reference ``avro`` library's compatibility checker."""

from __future__ import annotations

import json

import pytest

from ballast.avro.codec import SchemaStore, SchemaVersion, default_store
from ballast.paths import SCHEMAS_DIR
from spark_jobs.reduce.decode import UnreadableVersion, check_readable


def test_every_registered_version_of_every_schema_reads_as_the_current_one():
    store = default_store()
    previous = {json.loads(p.read_text())["name"] for p in (SCHEMAS_DIR / "previous").glob("*.avsc")}
    assert len(previous) >= 5  # control events, control requests, metrics, results, envelopes
    for name in store.names():
        check_readable(store.versions(name))
    assert len(store.versions("io.ballast.RoutedEnvelope")) >= 4


def _store(current: dict, *older: dict) -> list[SchemaVersion]:
    store = SchemaStore([SchemaVersion.from_json(current)])
    for s in older:
        store.register(s, current=False)
    return store.versions(
        current["name"] if "." in current["name"] else f"{current['namespace']}.{current['name']}"
    )


def record(*fields: dict) -> dict:
    return {"type": "record", "name": "Envelope", "namespace": "t", "fields": list(fields)}


def test_a_field_added_without_a_default_is_refused_naming_it():
    current = record({"name": "a", "type": "long"}, {"name": "b", "type": "string"})
    with pytest.raises(UnreadableVersion, match=r"reader_field_missing_default_value \(b at /fields/1\)"):
        check_readable(_store(current, record({"name": "a", "type": "long"})))
    defaulted = record({"name": "a", "type": "long"}, {"name": "b", "type": "string", "default": ""})
    check_readable(_store(defaulted, record({"name": "a", "type": "long"})))


def test_a_union_branch_the_current_version_dropped_is_refused():
    old = json.loads((SCHEMAS_DIR / "routed_envelope.avsc").read_text())
    (body,) = old["fields"]
    dropped = {**old, "fields": [{**body, "type": body["type"][:2]}]}  # no StateChunk any more
    with pytest.raises(UnreadableVersion, match="cannot be read as the current version"):
        check_readable(_store(dropped, old))
