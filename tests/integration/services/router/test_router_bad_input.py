"""Every malformed record is dead-lettered, never a crash: exactly-once router on a real broker.

Each kind of bad input below once crashed the router (the bad record blocked its partition and the
restarted router crashed on it again) or was routed into an envelope workers cannot decode. Mixed
1 in 10 into 100,000 good records: every bad one lands in the dead-letter topic with its reason,
error class and original sizes in headers (cut to fit when the producer could not write it whole),
every good one is routed exactly once, unchanged, to F(k); the router thread never raised. The
expectations come from what this test produced, not from the router.
"""

from __future__ import annotations

import math
import random
import struct
from collections import Counter
from typing import Any

from ballast.avro import wire
from ballast.avro.codec import AvroCodec
from ballast.control.state import initial_state
from ballast.kafka.clients import make_producer, produce_all
from ballast.workload import input_events

GOOD = 100_000
BAD = 10_000
BIG_GOOD = (7, 70_007, 99_999)  # good events with a 700 kB payload: routed via the measured path
PRODUCER_MAX = 1_000_000  # the router's producer: librdkafka's default message.max.bytes
ROUTER_MAX = PRODUCER_MAX - 512  # what the router writes at most (key + value + headers)
DEEP = 5_000  # JSON nesting levels: far beyond Python's recursion limit


def _avro_body(key: bytes, value: bytes, payload: bytes, event_time: bytes) -> bytes:
    return wire.INPUT_HEADER + wire.avro_string(key) + value + wire.avro_string(payload) + event_time


def bad_record(i: int, codec: AvroCodec) -> tuple[bytes | None, bytes | None, str, str]:
    """(Kafka key, value, reason, error class) of the i-th bad record; (key, value) pairs are unique."""
    tag = f"bad-{i}".encode()
    if i < 3:  # larger than the producer accepts at all: the dead letter itself must be cut
        big = b'{"key": "%s", "pad": "' % tag + b"x" * 1_040_000 + b'"}'
        return tag, big, "oversize", "InputError"
    if i < 6:  # passes the input size check, but its envelope would not fit the producer
        head = b'{"key": "%s", "pad": "' % tag
        return tag, head + b"y" * (999_938 - len(head) - 2) + b'"}', "oversize", "InputError"
    good = codec.encode({"key": f"bad-{i}", "value": 1.0, "payload": tag, "event_time": 1})
    kinds: list[tuple[bytes | None, bytes | None, str, str]] = [
        (tag, b'{"key": "\\ud800", "n": %d}' % i, "malformed", "InvalidKeyError"),  # lone surrogate
        (
            tag,
            b'{"key": "k", "n": %d, "x": ' % i + b"[" * DEEP + b"]" * DEEP + b"}",
            "malformed",
            "RecursionError",
        ),
        (tag, b'{"key": "k", "n": %d, "value": ' % i + b"9" * 400 + b"}", "bad-field", "InputError"),
        (tag, b'{"key": "k", "n": %d, "event_time": %d}' % (i, 2**63), "bad-field", "InputError"),
        (tag, b'{"key": "k", "n": %d, "value": 1e400}' % i, "bad-field", "InputError"),
        (tag, b'{"key": "k", "n": %d, "value": NaN}' % i, "bad-field", "InputError"),
        (tag, b'{"schema": {"type": "string"}, "payload": "\\ud800 %d"}' % i, "malformed", "InputError"),
        (tag, _avro_body(tag, struct.pack("<d", math.inf), tag, wire.zigzag(1)), "bad-field", "BodyError"),
        (tag, _avro_body(tag, struct.pack("<d", 1.0), tag, b"\xff" * 9 + b"\x02"), "malformed", "BodyError"),
        (tag, good[:-3], "truncated", "BodyError"),
        (tag, good[:2] + bytes(8) + good[10:], "unknown-schema", "InputError"),
        (tag, good + b"\x00\x01", "trailing-bytes", "BodyError"),
        (tag, b'{"value": 1, "n": %d}' % i, "missing-key", "InputError"),
        (tag, b'{"key": "x", "n": %d' % i, "bad-json", "InputError"),
        (tag, None, "null-value", "InputError"),
        (None, b"\xff\xfe" + tag, "malformed", "InputError"),
        (None, b"plain text without a key " + tag, "missing-key", "InputError"),
    ]
    return kinds[i % len(kinds)]


def test_bad_input_is_dead_lettered_and_never_stops_the_router(kit):
    codec = AvroCodec("io.ballast.InputEvent")
    events = list(input_events(GOOD, num_keys=5_000, z=1.0, seed=11))
    for s in BIG_GOOD:
        events[s]["payload"] = s.to_bytes(8, "big") + bytes(700_000)
    good = [(e["key"].encode(), codec.encode(e)) for e in events]
    bad = {(k, v): (reason, cls) for k, v, reason, cls in (bad_record(i, codec) for i in range(BAD))}
    assert len(bad) == BAD
    mixed = good + list(bad)
    random.Random(3).shuffle(mixed)
    # the test's own producer accepts records the router's producer does not (the broker does)
    producer = make_producer(kit.kafka.with_overrides(**{"message.max.bytes": 2_000_000}))
    produce_all(producer, kit.input, iter(mixed))

    router = kit.start_thread("r1")  # exactly-once, every size setting at its default
    assert router.settings.exactly_once and router.max_record_bytes == ROUTER_MAX
    kit.wait_committed(GOOD + BAD)
    thread = kit.threads[0][1]
    assert thread.is_alive() and not thread.errors
    totals = router.totals
    kit.stop_all()  # asserts the thread ended without an error
    assert (totals.offered, totals.routed, totals.dead_lettered) == (GOOD + BAD, GOOD, BAD)

    # the input as the broker stored it: (partition, offset) -> (key, value)
    stored = {
        (m.partition(), m.offset()): (m.key(), m.value()) for m in kit.read_topic(kit.input, GOOD + BAD)
    }
    check_routed(kit, events, stored)
    check_dead_letters(kit, bad, stored)


def check_routed(kit: Any, events: list[dict[str, Any]], stored: dict) -> None:
    """Every good event exactly once, unchanged, in partition F(key) of epoch 0, from its input record."""
    envelope = AvroCodec("io.ballast.RoutedEnvelope")
    table = initial_state(kit.layout.workers).table
    seen: Counter[int] = Counter()
    for m in kit.read_topic(kit.routed, GOOD):
        assert len(m.value()) + len(m.key() or b"") <= ROUTER_MAX
        branch, rec = envelope.decode(m.value())["body"]
        if branch != "io.ballast.DataRecord":
            continue
        seq = int.from_bytes(rec["payload"][:8], "big")
        ev = events[seq]
        assert (rec["key"], rec["value"], rec["payload"], rec["event_time"]) == (
            ev["key"], ev["value"], ev["payload"], ev["event_time"],
        )  # fmt: skip
        assert m.key() == ev["key"].encode() and m.partition() == table.route(m.key())
        assert (rec["source_topic"], rec["router_id"], rec["epoch"]) == (kit.input, "r1", 0)
        assert stored[(rec["source_partition"], rec["source_offset"])][0] == m.key()
        seen[seq] += 1
    assert sorted(seen) == list(range(GOOD)), f"{GOOD - len(seen)} good records not routed"
    assert max(seen.values()) == 1, "a good record was routed twice"


def headers_size(headers: list[tuple[str, bytes]]) -> int:
    """Bytes the headers take in a Kafka record: zigzag varint lengths, then the bytes."""
    return sum(len(wire.zigzag(len(k))) + len(k) + len(wire.zigzag(len(v))) + len(v) for k, v in headers)


def check_dead_letters(kit: Any, bad: dict, stored: dict) -> None:
    """Every bad record once, with reason, class and original sizes; cut only when too large."""
    dlq = kit.read_topic(kit.layout.name("dead_letter"), BAD)
    assert len(dlq) == BAD
    positions = set()
    reasons: Counter[str] = Counter()
    for m in dlq:
        h = {k: v.decode() for k, v in m.headers()}
        assert (h["ballast.source.topic"], h["ballast.router.id"]) == (kit.input, "r1")
        assert h["ballast.error.detail"]
        pos = (int(h["ballast.source.partition"]), int(h["ballast.source.offset"]))
        positions.add(pos)
        key, value = stored[pos]
        reason, cls = bad[(key, value)]
        assert (h["ballast.error.reason"], h["ballast.error.class"]) == (reason, cls), (
            key,
            value and value[:80],
        )
        assert h["ballast.source.bytes"] == str(-1 if value is None else len(value))
        assert h["ballast.source.key.bytes"] == str(-1 if key is None else len(key))
        size = len(m.value() or b"") + len(m.key() or b"")
        if value is not None and len(value) > 900_000:  # too large for the router's producer: cut
            assert m.key() == key and value.startswith(m.value()) and len(m.value()) < len(value)
            assert size + headers_size(m.headers()) == ROUTER_MAX
        else:
            assert (m.key(), m.value()) == (key, value), "a dead letter that fits is the original record"
        reasons[reason] += 1
    assert len(positions) == BAD
    assert reasons == Counter(reason for reason, _ in bad.values())
