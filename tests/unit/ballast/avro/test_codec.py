"""The Avro codec against independent references: the Avro spec's header layout, the reference
``avro`` library, fastavro's own fingerprint, and hand-built byte strings for bad input."""

from __future__ import annotations

import contextlib
import io
import json

import avro.io
import avro.schema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ballast.avro.codec import (
    HEADER_LEN,
    MAGIC,
    AvroCodec,
    DecodeError,
    EncodeError,
    SchemaStore,
    SchemaVersion,
    _strip_logical_types,
    default_store,
)
from ballast.paths import SCHEMAS_DIR

SAMPLES = {
    "io.ballast.InputEvent": {
        "key": "k1",
        "value": 2.5,
        "payload": b"\x00\xff",
        "event_time": 1_700_000_000_123,
    },
    "io.ballast.RoutedEnvelope": {
        "body": (
            "io.ballast.DataRecord",
            {
                "key": "k",
                "value": 1.0,
                "payload": b"p",
                "event_time": 5,
                "epoch": 7,
                "router_id": "r1",
                "source_topic": "in",
                "source_partition": 3,
                "source_offset": 99,
            },
        )
    },
    "io.ballast.ControlEvent": {
        "epoch": 12,
        "issued_at": 1,
        "issuer": "test",
        "type": "ROUTING_UPDATE",
        "request_id": "req-1",
        "payload": (
            "io.ballast.RoutingUpdate",
            {"assign": {"hot": 3}, "unassign": ["cold"], "reason": "x", "migration_id": "m-1"},
        ),
    },
    "io.ballast.ControlRequest": {
        "request_id": "req-1",
        "issuer": "test",
        "issued_at": 5,
        "expected_epoch": 11,
        "kind": "ROUTING_UPDATE",
        "payload": ("io.ballast.RoutingUpdateRequest", {"assign": {"hot": 3}, "unassign": [], "reason": "x"}),
    },
    "io.ballast.ControlResponse": {
        "request_id": "req-1",
        "accepted": False,
        "epoch": 11,
        "reason": "stale-epoch",
        "detail": "expected 10",
        "duplicate": False,
        "controller": "c-1",
        "answered_at": 6,
    },
    "io.ballast.MetricsRecord": {
        "source": "router-1",
        "interval_start": 0,
        "interval_end": 10_000,
        "body": (
            "io.ballast.RouterKeyStats",
            {
                "epoch": 1,
                "first_epoch": 1,
                "worker_records": [1, 2],
                "worker_bytes": [10, 20],
                "offered_records": 3,
                "kept_records": 3,
                "dead_lettered": 0,
                "heavy_hitters": [{"key": "a", "count": 2, "error": 0}],
                "sketch_capacity": 100,
                "sketch_records": 3,
                "useful_ms": 1234,
            },
        ),
    },
    "io.ballast.OutputResult": {
        "key": "k",
        "job": "agg",
        "window_start": 0,
        "window_end": 1000,
        "count": 3,
        "sum": 6.0,
        "min": 1.0,
        "max": 3.0,
        "mean": 2.0,
        "values": [1.0, 3.0],
        "worker": 2,
        "epoch": 4,
        "revision": 1,
        "excluded_records": 2,
        "keep_probability": 0.5,
        "estimated_count": 10.0,
        "relative_error": 0.3,
        "exact": False,
        "sampled_records": 5,
        "estimated_sum": 12.0,
        "count_std_error": 3.0,
        "sum_std_error": 4.5,
        "count_low": 5.0,
        "count_high": 16.5,
        "sum_low": 3.2,
        "sum_high": 20.8,
        "min_max_are_bounds": True,
    },
}


def test_every_shipped_schema_has_a_sample():
    assert sorted(SAMPLES) == default_store().names()


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_round_trip(name):
    codec = AvroCodec(name)
    data = codec.encode(SAMPLES[name])
    assert data[:2] == MAGIC
    assert codec.decode(data) == SAMPLES[name]


def test_header_is_spec_layout():
    """C3 01 then the CRC-64-AVRO fingerprint, little-endian, as the Apache avro library computes it."""
    codec = AvroCodec("io.ballast.InputEvent")
    data = codec.encode(SAMPLES["io.ballast.InputEvent"])
    reference = avro.schema.parse(codec.schema.canonical_form).fingerprint("CRC-64-AVRO")
    assert data[:HEADER_LEN] == b"\xc3\x01" + bytes(reference)


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_reference_avro_library_decodes_our_bytes(name):
    """The Apache ``avro`` package reads the body after checking the header with its own fingerprint.

    Decision (documented in codec.py's tests): avro-python 1.12 writes logical-typed primitives as
    ``{"type":"long"}`` in its canonical form, against the spec (Java and fastavro give ``"long"``),
    so its fingerprint of the *raw* schema differs; on the schema without logical-type annotations
    (which Parsing Canonical Form removes anyway) it must agree with ours.
    """
    source = default_store().current(name).source
    ref_schema = avro.schema.parse(json.dumps(_strip_logical_types(source)))
    codec = AvroCodec(name)
    data = codec.encode(SAMPLES[name])
    assert data[2:HEADER_LEN] == ref_schema.fingerprint("CRC-64-AVRO")
    decoded = avro.io.DatumReader(ref_schema).read(avro.io.BinaryDecoder(io.BytesIO(data[HEADER_LEN:])))
    assert _untag(SAMPLES[name]) == decoded


def _untag(value):
    """Drop fastavro's (record-name, value) union tags: the reference library returns bare dicts."""
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str):
        return _untag(value[1])
    if isinstance(value, dict):
        return {k: _untag(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_untag(v) for v in value]
    return value


def test_schema_evolution_old_writer_new_reader():
    """A record written before ``value`` existed reads with the default (1.0)."""
    old = {
        "type": "record",
        "name": "InputEvent",
        "namespace": "io.ballast",
        "fields": [
            {"name": "key", "type": "string"},
            {"name": "payload", "type": "bytes"},
            {"name": "event_time", "type": "long"},
        ],
    }
    store = SchemaStore.from_dir()
    old_version = store.register(old, current=False)
    writer = AvroCodec(old_version, store)
    reader = AvroCodec("io.ballast.InputEvent", store)
    assert reader.schema is not old_version
    data = writer.encode({"key": "k", "payload": b"", "event_time": 9})
    assert reader.decode(data) == {"key": "k", "value": 1.0, "payload": b"", "event_time": 9}


def test_incompatible_writer_is_a_typed_error():
    store = SchemaStore.from_dir()
    other = store.register(
        {
            "type": "record",
            "name": "InputEvent",
            "namespace": "io.ballast",
            "fields": [{"name": "key", "type": "int"}],
        },
        current=False,
    )
    data = AvroCodec(other, store).encode({"key": 5})
    with pytest.raises(DecodeError) as err:
        AvroCodec("io.ballast.InputEvent", store).decode(data, "in", 0, 1)
    assert err.value.reason == "incompatible-schema"


def test_encode_rejects_a_record_that_does_not_fit():
    with pytest.raises(EncodeError):
        AvroCodec("io.ballast.InputEvent").encode({"key": 5, "event_time": "x"})


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "truncated"),
        (b"\xc3\x01\x00", "truncated"),
        (b"\x00" * 20, "bad-magic"),
        (b'{"key": "k"}', "bad-magic"),
        (b"\xc3\x01" + b"\x00" * 8 + b"xyz", "unknown-schema"),
        (None, "truncated"),
    ],
)
def test_bad_bytes_are_typed_errors_naming_the_position(data, reason):
    with pytest.raises(DecodeError) as err:
        AvroCodec("io.ballast.InputEvent").decode(data, "ballast.input", 2, 41)
    e = err.value
    assert (e.reason, e.topic, e.partition, e.offset) == (reason, "ballast.input", 2, 41)
    assert "ballast.input[2]@41" in str(e)


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_every_truncation_is_a_typed_error(name):
    codec = AvroCodec(name)
    data = codec.encode(SAMPLES[name])
    for cut in range(len(data)):
        with pytest.raises(DecodeError) as err:
            codec.decode(data[:cut], "t", 0, cut)
        assert err.value.reason in {"truncated", "malformed"}, (cut, err.value)


def test_trailing_garbage_is_a_typed_error():
    codec = AvroCodec("io.ballast.InputEvent")
    with pytest.raises(DecodeError) as err:
        codec.decode(codec.encode(SAMPLES["io.ballast.InputEvent"]) + b"\x01")
    assert err.value.reason == "trailing-bytes"


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64))
def test_random_bytes_never_escape_as_other_exceptions(blob):
    codec = AvroCodec("io.ballast.RoutedEnvelope")
    with contextlib.suppress(DecodeError):
        codec.decode(blob)


@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=0, max_size=64))
def test_garbage_body_behind_a_valid_header_is_typed(blob):
    """Worst case: a correct header followed by garbage. It decodes or raises DecodeError, never crashes."""
    codec = AvroCodec("io.ballast.RoutedEnvelope")
    try:
        record = codec.decode(codec.schema.header + blob)
    except DecodeError:
        return
    assert "body" in record


def test_schema_version_identity_is_its_canonical_form():
    a = SchemaVersion.from_json(
        {"type": "record", "name": "X", "doc": "one", "fields": [{"name": "a", "type": "int"}]}
    )
    b = SchemaVersion.from_json(
        {"type": "record", "name": "X", "doc": "two", "fields": [{"name": "a", "type": "int"}]}
    )
    assert a.fingerprint == b.fingerprint  # docs are not part of Parsing Canonical Form


def test_records_of_the_previous_release_decode_with_the_new_fields_defaulted():
    """``ballast/schemas/previous`` keeps every released writer version: an EpochMarker written before
    markers stated the input partitions they cover decodes with ``covers = []``."""
    old_schema = json.loads((SCHEMAS_DIR / "previous" / "routed_envelope.v1.avsc").read_text())
    old_codec = AvroCodec("io.ballast.RoutedEnvelope", SchemaStore([SchemaVersion.from_json(old_schema)]))
    marker = {"epoch": 3, "router_id": "r", "worker": 1, "marker_time": 5}
    value = old_codec.encode({"body": ("io.ballast.EpochMarker", marker)})
    assert AvroCodec("io.ballast.RoutedEnvelope").decode(value)["body"] == (
        "io.ballast.EpochMarker",
        {**marker, "covers": [], "shed": []},
    )


def test_results_written_before_they_stated_their_error_read_as_not_known_exact():
    """An ``OutputResult`` of the previous release (keep_probability 1.0 whatever was shed) decodes
    with the error fields defaulted to "unknown": not exact, min and max possibly bounds, no
    estimated sum or interval."""
    old_schema = json.loads((SCHEMAS_DIR / "previous" / "output_result.v3.avsc").read_text())
    old_codec = AvroCodec("io.ballast.OutputResult", SchemaStore([SchemaVersion.from_json(old_schema)]))
    old_fields = {f["name"] for f in old_schema["fields"]}
    record = {k: v for k, v in SAMPLES["io.ballast.OutputResult"].items() if k in old_fields}
    decoded = AvroCodec("io.ballast.OutputResult").decode(old_codec.encode(record))
    assert {k: decoded[k] for k in old_fields} == record
    assert {k: v for k, v in decoded.items() if k not in old_fields} == {
        "exact": False,
        "sampled_records": 0,
        "estimated_sum": None,
        "count_std_error": None,
        "sum_std_error": None,
        "count_low": None,
        "count_high": None,
        "sum_low": None,
        "sum_high": None,
        "min_max_are_bounds": True,
    }
