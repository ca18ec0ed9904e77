"""Spliced envelopes decode with fastavro to the expected record; input formats and their errors."""

from __future__ import annotations

import argparse
import json

import pytest

from ballast.avro import wire
from ballast.avro.codec import AvroCodec
from services.router.config import RouterSettings
from services.router.input_formats import FormatOptions, InputError, InputParser

IN = AvroCodec("io.ballast.InputEvent")
ENV = AvroCodec("io.ballast.RoutedEnvelope")


@pytest.mark.parametrize(
    "key,payload,et",
    [
        ("k", b"", 0),
        ("key-0000001", b"x" * 100, 1_767_225_600_000),
        ("ü" * 70, b"y" * 9000, -5),
        ("", b"", 2**40),
    ],
)
def test_spliced_envelope_equals_fastavro(key, payload, et):
    v = IN.encode({"key": key, "value": 2.5, "payload": payload, "event_time": et})
    assert wire.scan_input_body(v) == key.encode()
    for offset in (0, 63, 64, 8192, 123_456_789, 2**40):
        env = wire.DATA_PREFIX + v[10:] + wire.data_suffix(3, "r", "topic", 2) + wire.zigzag(offset)
        branch, rec = ENV.decode(env)["body"]
        assert branch == "io.ballast.DataRecord"
        assert rec == {
            "key": key,
            "value": 2.5,
            "payload": payload,
            "event_time": et,
            "epoch": 3,
            "router_id": "r",
            "source_topic": "topic",
            "source_partition": 2,
            "source_offset": offset,
        }
    covers = wire.covers_field([("in", 2), ("a", 0)])
    assert ENV.decode(wire.epoch_marker(9, "r", 4, 77, covers))["body"] == (
        "io.ballast.EpochMarker",
        {
            "epoch": 9,
            "router_id": "r",
            "worker": 4,
            "marker_time": 77,
            "covers": [
                {"topic": "a", "partition": 0, "event_time": None},
                {"topic": "in", "partition": 2, "event_time": None},
            ],
            "shed": [],
        },
    )
    # version 4: each covered partition's event-time progress, and the spans shed for this partition
    covers = wire.covers_field([("in", 2), ("a", 0)], {("in", 2): 1_767_225_600_123})
    shed = wire.shed_field([("in", 1_000, 2_999, 0.25)])
    body = ENV.decode(wire.epoch_marker(9, "r", 4, 77, covers, shed))["body"][1]
    assert body["covers"] == [
        {"topic": "a", "partition": 0, "event_time": None},
        {"topic": "in", "partition": 2, "event_time": 1_767_225_600_123},
    ]
    assert body["shed"] == [{"topic": "in", "first": 1_000, "last": 2_999, "keep": 0.25}]


def test_scan_rejects_truncated_and_trailing():
    v = IN.encode({"key": "abc", "value": 1.0, "payload": b"p" * 300, "event_time": 10**12})
    for cut in range(11, len(v)):
        with pytest.raises(wire.BodyError):
            wire.scan_input_body(v[:cut])
    with pytest.raises(wire.BodyError, match="trailing"):
        wire.scan_input_body(v + b"\x00")


def body_of(key: str, value: float, payload: bytes, et: int) -> bytes:
    return IN.encode({"key": key, "value": value, "payload": payload, "event_time": et})[10:]


def test_json_connect_envelope_and_strings():
    p = InputParser(FormatOptions("auto", key_field="user"))
    doc = {"user": "u1", "value": 3, "event_time": 5}
    raw = json.dumps(doc).encode()
    assert p.parse(raw, None, 99) == (b"u1", body_of("u1", 3.0, raw, 5))
    env = json.dumps({"schema": {"type": "struct"}, "payload": doc}).encode()
    assert p.parse(env, None, 99) == (b"u1", body_of("u1", 3.0, env, 5))
    assert p.parse(b"hello", b"k", 42) == (b"k", body_of("k", 1.0, b"hello", 42))
    conn_str = json.dumps({"schema": {"type": "string"}, "payload": "line"}).encode()
    assert p.parse(conn_str, b"k", 1) == (b"k", body_of("k", 1.0, b"line", 1))
    by_value = InputParser(FormatOptions("string", string_key="value"))
    assert by_value.parse(b"word", None, 1)[0] == b"word"


@pytest.mark.parametrize(
    "value,key,reason",
    [
        (None, b"k", "null-value"),
        (b"x" * 30, b"k", "oversize"),
        (b'{"value": 1}', None, "missing-key"),
        (b'{"key": ', None, "bad-json"),
        (b'{"key":1,"value":"?"}', None, "bad-field"),
        (b"\xff\xfe", b"k", "malformed"),
        (b"text", None, "missing-key"),
        (b"\xc3\x01" + bytes(8) + b"\x02a", None, "unknown-schema"),
    ],
)
def test_bad_input_has_a_reason(value, key, reason):
    p = InputParser(FormatOptions("auto", max_record_bytes=24))
    with pytest.raises(InputError) as info:
        p.parse(value, key, 0)
    assert info.value.reason == reason


def test_router_settings_flags_env_and_defaults():
    cfg = RouterSettings.from_args(
        None,
        env={
            "BALLAST_ROUTER_ROUTER_ID": "r7",
            "BALLAST_ROUTER_EXACTLY_ONCE": "false",
            "BALLAST_ROUTER_INPUT_TOPICS": "a,b",
            "BALLAST_ROUTER_BATCH_SIZE": "5",
        },
    )
    assert (cfg.router_id, cfg.exactly_once, cfg.input_topics, cfg.batch_size) == ("r7", False, ("a", "b"), 5)
    assert cfg.group_id == ""  # the deployment's: <prefix>.routers once resolved
    assert cfg.resolved("ballast").transactional_id == "ballast.routers.r7"
    # topic names are not router settings: they come from the topic layout only
    assert not {"prefix", "routed_topic", "control_topic", "workers"} & set(cfg.as_dict())
    parser = argparse.ArgumentParser()
    RouterSettings.add_arguments(parser)
    flags = RouterSettings.from_args(parser.parse_args(["--at-least-once", "--router-id", "r8"]), env={})
    assert (flags.router_id, flags.exactly_once, flags.input_topics) == ("r8", False, ())
    with pytest.raises(ValueError):
        RouterSettings(input_format="xml")
