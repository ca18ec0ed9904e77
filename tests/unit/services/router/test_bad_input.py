"""Every malformed record is dead-lettered, never a crash (exactly-once mode, injected clients).

Why: in exactly-once mode a record that makes the loop raise is never committed past; the restarted
router reads it again and raises again, so one bad record stops its partition for good. Each case
here once crashed the router or was routed into an envelope workers cannot read. The producer fake
behaves like librdkafka's ``produce()``: it refuses a record whose key, value and headers (plus
librdkafka's per-record framing) exceed its ``message.max.bytes`` with MSG_SIZE_TOO_LARGE.
"""

from __future__ import annotations

import logging
import math
import struct
from typing import Any

import pytest
from confluent_kafka import Message

from ballast.avro import wire
from ballast.avro.codec import AvroCodec, SchemaStore
from ballast.kafka.clients import make_producer
from ballast.kafka.configuration import KafkaConfig
from services.router.config import RouterSettings
from services.router.envelopes import DLQ_HEADERS, PRODUCE_MARGIN
from services.router.input_formats import FormatOptions, InputError, InputParser
from services.router.router import Router
from tests.support import router_fakes as fakes
from tests.support.kafka_fakes import RecordingProducer, headers_size
from tests.support.router_fakes import DEAD, ENVELOPE, ROUTED, play

pytestmark = pytest.mark.unit

IN = AvroCodec("io.ballast.InputEvent")
LONG_MAX = 2**63 - 1


def make_router(message_max_bytes: int | None = 1_000_000, **settings: Any) -> Router:
    """Exactly-once unless told otherwise, over a producer refusing records as librdkafka does."""
    settings.setdefault("exactly_once", True)
    return fakes.make_router(message_max_bytes=message_max_bytes, **settings)


def run(router: Router, values: list[tuple[bytes | None, bytes | None]]) -> RecordingProducer:
    """Route one batch of (key, value) records from partition 0 (offsets 0..n-1), then stop."""
    batch = [
        Message(topic="in", partition=0, offset=i, key=k, value=v, timestamp=(1, 1_000 + i))
        for i, (k, v) in enumerate(values)
    ]
    play(router, ("assign", [("in", 0)]), ("batch", batch))
    return router.producer  # type: ignore[return-value]


def good(i: int) -> tuple[bytes, bytes]:
    key = f"key-{i}"
    return key.encode(), IN.encode({"key": key, "value": 1.0, "payload": b"p%d" % i, "event_time": i})


def dead_letters(producer: RecordingProducer) -> list[tuple[bytes | None, bytes | None, dict[str, str]]]:
    return [
        (s.key, s.value, {n: h.decode() for n, h in s.headers or []})
        for s in producer.sent
        if s.topic == DEAD
    ]


def routed_keys(producer: RecordingProducer) -> list[bytes | None]:
    return [
        s.key
        for s in producer.sent
        if s.topic == ROUTED and ENVELOPE.decode(s.value)["body"][0].endswith("DataRecord")
    ]


def assert_dead_lettered(
    router: Router, bad: tuple[bytes | None, bytes | None], reason: str, error_class: str
) -> dict[str, str]:
    """``bad`` between two good records: it is dead-lettered, both good ones routed, offset 3 committed."""
    producer = run(router, [good(0), bad, good(2)])
    assert routed_keys(producer) == [b"key-0", b"key-2"]
    [(_, _, headers)] = dead_letters(producer)
    assert (headers["ballast.error.reason"], headers["ballast.error.class"]) == (reason, error_class)
    assert list(headers) == list(DLQ_HEADERS)
    assert headers["ballast.source.offset"] == "1" and headers["ballast.router.id"] == "r-test"
    assert headers["ballast.source.bytes"] == str(-1 if bad[1] is None else len(bad[1]))
    assert router.consumer.group_offsets == {("in", 0): 3}  # type: ignore[attr-defined]
    return headers


# --- JSON input: what once raised inside the loop, or was routed although it cannot be read -----------

DEEP = b'{"key": "a", "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"


@pytest.mark.parametrize(
    "value,reason,error_class",
    [
        (DEEP, "malformed", "RecursionError"),  # json.loads raised RecursionError
        (b'{"key": "a", "value": ' + b"9" * 400 + b"}", "bad-field", "InputError"),  # OverflowError
        (b'{"key": "a", "value": 1e400}', "bad-field", "InputError"),  # inf, was routed
        (b'{"key": "a", "value": NaN}', "bad-field", "InputError"),  # Python's json accepts NaN
        (b'{"key": "a", "value": -Infinity}', "bad-field", "InputError"),
        (b'{"key": "a", "event_time": %d}' % 2**63, "bad-field", "InputError"),  # beyond an Avro long
        (b'{"key": "a", "event_time": %d}' % (-(2**63) - 1), "bad-field", "InputError"),
        (b'{"key": "\\ud800", "value": 1}', "malformed", "InvalidKeyError"),  # lone surrogate key
        # a Connect string payload with a lone surrogate raised UnicodeEncodeError
        (b'{"schema": {"type": "string"}, "payload": "\\ud800"}', "malformed", "InputError"),
    ],
)
def test_bad_json_is_dead_lettered_and_the_offset_advances(value, reason, error_class):
    headers = assert_dead_lettered(make_router(), (b"k", value), reason, error_class)
    assert headers["ballast.error.detail"]


def test_at_least_once_mode_dead_letters_the_same_records():
    router = make_router(exactly_once=False)
    producer = run(
        router, [(b"k", DEEP), (b"k", json_of_size(999_938)), (b"a", avro_event(math.nan)), good(3)]
    )
    assert routed_keys(producer) == [b"key-3"]
    assert [h["ballast.error.reason"] for _, _, h in dead_letters(producer)] == [
        "malformed",
        "oversize",
        "bad-field",
    ]
    assert router.consumer.group_offsets == {("in", 0): 4}  # type: ignore[attr-defined]


def test_any_exception_while_parsing_is_dead_lettered_as_malformed_with_its_class():
    router = make_router()

    def broken(value: bytes | None, key: bytes | None, ts: int) -> tuple[bytes, bytes]:
        raise ZeroDivisionError("a parser bug")

    router.parser.parse = broken  # type: ignore[method-assign]
    headers = assert_dead_lettered(router, (b"k", b"plain text"), "malformed", "ZeroDivisionError")
    assert "a parser bug" in headers["ballast.error.detail"]


def test_unchanged_dead_letters_still_carry_the_original_record():
    producer = run(make_router(), [(b"k", b'{"key": '), (None, None)])
    [(k1, v1, h1), (k2, v2, h2)] = dead_letters(producer)
    assert (k1, v1, h1["ballast.error.reason"]) == (b"k", b'{"key": ', "bad-json")
    assert h1["ballast.error.class"] == "InputError"
    assert h1["ballast.source.bytes"] == "8" and h1["ballast.source.key.bytes"] == "1"
    assert (k2, v2, h2["ballast.error.reason"]) == (None, None, "null-value")
    assert (h2["ballast.source.bytes"], h2["ballast.source.key.bytes"]) == ("-1", "-1")


def test_json_numbers_at_the_edges_of_their_range_are_routed():
    p = InputParser(FormatOptions())
    for et in (LONG_MAX, -(2**63)):
        _, body = p.parse(b'{"key": "a", "event_time": %d}' % et, None, 0)
        assert IN.decode(wire.INPUT_HEADER + body)["event_time"] == et
    big = b'{"key": "a", "value": 1' + b"0" * 308 + b"}"  # 1e308 as an int: fits a double
    assert IN.decode(wire.INPUT_HEADER + p.parse(big, None, 0)[1])["value"] == 1e308


def test_an_older_avro_version_is_range_checked_like_json():
    store = SchemaStore.from_dir()
    old = store.register(
        {
            "type": "record",
            "name": "InputEvent",
            "namespace": "io.ballast",
            "fields": [
                {"name": "key", "type": "string"},
                {"name": "value", "type": "double"},
                {"name": "event_time", "type": "long"},
            ],
        },
        current=False,
    )
    p = InputParser(FormatOptions())
    p.avro = AvroCodec("io.ballast.InputEvent", store)
    nan = old.header + wire.avro_string("a") + struct.pack("<d", math.nan) + wire.zigzag(1)
    with pytest.raises(InputError, match="bad-field"):
        p.parse(nan, None, 0)
    two = old.header + wire.avro_string("a") + struct.pack("<d", 2.0) + wire.zigzag(7)
    assert p.parse(two, None, 0)[0] == b"a"


# --- Avro input: the hot path's scan ------------------------------------------------------------------


def avro_event(value: float = 1.0, event_time_varint: bytes | None = None, payload: bytes = b"p") -> bytes:
    et = event_time_varint if event_time_varint is not None else wire.zigzag(5)
    return (
        wire.INPUT_HEADER + wire.avro_string("a") + struct.pack("<d", value) + wire.avro_string(payload) + et
    )


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_scan_rejects_a_non_finite_value(value):
    with pytest.raises(wire.BodyError) as info:
        wire.scan_input_body(avro_event(value))
    assert info.value.reason == "bad-field"


def test_scan_rejects_an_event_time_varint_beyond_a_long():
    ten_bytes = b"\xff" * 9 + b"\x02"  # 10 groups: 65 significant bits
    with pytest.raises(wire.BodyError) as info:
        wire.scan_input_body(avro_event(event_time_varint=ten_bytes))
    assert info.value.reason == "malformed"
    for et in (LONG_MAX, -(2**63)):  # the longest valid varints end in 0x01
        assert len(wire.zigzag(et)) == 10
        assert wire.scan_input_body(avro_event(event_time_varint=wire.zigzag(et))) == b"a"
    assert wire.scan_input_body(avro_event(-1.5e308)) == b"a"


def test_avro_hot_path_dead_letters_non_finite_values_and_overflowing_times():
    router = make_router()
    assert_dead_lettered(router, (b"a", avro_event(math.inf)), "bad-field", "BodyError")
    router = make_router()
    assert_dead_lettered(
        router, (b"a", avro_event(event_time_varint=b"\xff" * 9 + b"\x7f")), "malformed", "BodyError"
    )


# --- sizes: what the router produces must fit the producer's message.max.bytes ----------------------


def json_of_size(n: int, key: str = "big") -> bytes:
    head = b'{"key": "%s", "pad": "' % key.encode()
    return head + b"x" * (n - len(head) - 2) + b'"}'


def test_json_just_under_the_limit_is_dead_lettered_not_a_producer_error():
    value = json_of_size(999_938)  # passed the input check, then the envelope was too large to produce
    headers = assert_dead_lettered(make_router(), (b"k", value), "oversize", "InputError")
    assert "bytes" in headers["ballast.error.detail"]


def test_avro_just_under_the_limit_is_dead_lettered_not_a_producer_error():
    value = avro_event(payload=b"y" * 999_960)
    assert len(value) <= 1_000_000
    assert_dead_lettered(make_router(), (b"a", value), "oversize", "InputError")


def test_large_records_that_fit_are_routed_exactly_up_to_the_limit():
    """Records too large for the hot path's bound take the general path, where the size is exact."""
    router = make_router()
    limit = router.max_record_bytes
    assert limit == 1_000_000 - PRODUCE_MARGIN
    sfx = wire.data_suffix(0, "r-test", "in", 0)

    def produced(value: bytes) -> int:  # envelope + key at offset 1
        return len(wire.DATA_PREFIX) + len(value) - 10 + len(sfx) + 1 + 1

    def avro_producing(n: int) -> bytes:
        value = avro_event(payload=b"z" * (n - 100))
        return avro_event(payload=b"z" * (n - 100 + n - produced(value)))

    fits, over = avro_producing(limit), avro_producing(limit + 1)
    assert (produced(fits), produced(over)) == (limit, limit + 1)
    producer = run(router, [good(0), (b"a", fits), (b"a", over)])
    assert routed_keys(producer) == [b"key-0", b"a"]
    [routed] = [len(s.value) + len(s.key) for s in producer.sent if s.topic == ROUTED and s.key == b"a"]
    assert routed == limit
    assert [h["ballast.error.reason"] for _, _, h in dead_letters(producer)] == ["oversize"]


def test_oversize_dead_letter_is_truncated_to_fit_and_says_how_large_it_was():
    value = avro_event(payload=b"y" * 1_040_000)  # larger than the producer accepts at all
    headers = assert_dead_lettered(make_router(), (b"a", value), "oversize", "InputError")
    assert headers["ballast.source.bytes"] == str(len(value))
    assert headers["ballast.source.key.bytes"] == "1"


def test_a_huge_kafka_key_is_cut_too():
    router = make_router(input_format="string")
    producer = run(router, [(b"k" * 1_200_000, b"text")])
    [(key, value, headers)] = dead_letters(producer)
    assert headers["ballast.error.reason"] == "oversize"
    assert value == b"text" and key == b"k" * len(key) and 0 < len(key) < 1_000_000
    assert headers["ballast.source.key.bytes"] == "1200000" and headers["ballast.source.bytes"] == "4"
    encoded = [(n, h.encode()) for n, h in headers.items()]
    assert len(key) + len(value) + headers_size(encoded) <= 1_000_000 - PRODUCE_MARGIN


def test_when_key_and_value_are_both_large_each_keeps_half():
    producer = run(make_router(input_format="string"), [(b"k" * 700_000, b"v" * 800_000)])
    [(key, value, headers)] = dead_letters(producer)
    encoded = [(n, h.encode()) for n, h in headers.items()]
    room = 1_000_000 - PRODUCE_MARGIN - headers_size(encoded)
    assert (len(value), len(key)) == (room // 2, room - room // 2)
    assert (headers["ballast.source.bytes"], headers["ballast.source.key.bytes"]) == ("800000", "700000")


# --- the limit: --max-record-bytes and the producer's message.max.bytes -------------------------------


def test_limit_is_the_producer_limit_minus_the_margin_unless_set_lower():
    assert make_router().max_record_bytes == 1_000_000 - PRODUCE_MARGIN
    assert make_router(message_max_bytes=2_000_000).max_record_bytes == 2_000_000 - PRODUCE_MARGIN
    assert make_router(max_record_bytes=4_000).max_record_bytes == 4_000
    # a producer that does not say: librdkafka's default
    assert make_router(message_max_bytes=None).max_record_bytes == 1_000_000 - PRODUCE_MARGIN


def test_a_max_record_bytes_the_producer_cannot_write_is_lowered_with_a_warning(caplog):
    with caplog.at_level(logging.WARNING, logger="services.router"):
        router = make_router(max_record_bytes=5_000_000)
    assert router.max_record_bytes == 1_000_000 - PRODUCE_MARGIN
    assert "max_record_bytes 5000000" in caplog.text and "message.max.bytes 1000000" in caplog.text
    # the setting's own limit still applies to a record below the producer's
    producer = run(make_router(max_record_bytes=4_000), [(b"k", json_of_size(3_990))])
    assert [h["ballast.error.reason"] for _, _, h in dead_letters(producer)] == ["oversize"]


def test_make_producer_reports_its_message_max_bytes():
    quiet = {"bootstrap.servers": "127.0.0.1:9", "log_level": 0}
    assert make_producer(KafkaConfig(), **quiet).message_max_bytes == 1_000_000
    bigger = KafkaConfig().with_overrides(**{"message.max.bytes": "2000000"})
    assert make_producer(bigger, **quiet).message_max_bytes == 2_000_000


def test_settings_refuse_a_negative_max_record_bytes():
    with pytest.raises(ValueError, match="max_record_bytes"):
        RouterSettings(max_record_bytes=-1)
    assert RouterSettings().max_record_bytes == 0  # 0: as large as the producer allows
