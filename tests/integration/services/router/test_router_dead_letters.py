"""Acceptance 5: 10,000 malformed records among 100,000 good ones: every malformed one in the
dead-letter topic, unchanged, with reason and source position in headers; every good one routed
exactly once; the router never restarts (one thread, one run, no error)."""

from __future__ import annotations

import random
from collections import Counter

from ballast.avro.codec import AvroCodec
from ballast.workload import input_events

GOOD = 100_000
BAD = 10_000
MAX_BYTES = 4_000


def malformed(i: int, codec: AvroCodec) -> tuple[bytes | None, bytes | None, str]:
    """(Kafka key, value, expected reason) of the i-th malformed record; all values unique."""
    tag = f"bad-{i}".encode()
    good = codec.encode({"key": f"bad-{i}", "value": 1.0, "payload": tag, "event_time": 1})
    kind = i % 9
    if kind == 0:
        return tag, good[:-3], "truncated"
    if kind == 1:
        return tag, good[:2] + bytes(8) + good[10:], "unknown-schema"
    if kind == 2:
        return tag, good + b"\x00\x01", "trailing-bytes"
    if kind == 3:
        return tag, b'{"value": 1, "n": %d}' % i, "missing-key"
    if kind == 4:
        return tag, b'{"key": "x", "n": %d' % i, "bad-json"
    if kind == 5:
        big = codec.encode({"key": f"bad-{i}", "value": 1.0, "payload": tag * 1000, "event_time": 1})
        return tag, big, "oversize"
    if kind == 6:
        return tag, None, "null-value"
    if kind == 7:
        return None, b"\xff\xfe" + tag, "malformed"
    return None, b"plain text without a key " + tag, "missing-key"


def test_malformed_records_go_to_the_dead_letter_topic(kit):
    codec = AvroCodec("io.ballast.InputEvent")
    events = list(input_events(GOOD, num_keys=5_000, z=1.0, seed=5))
    good = [(e["key"].encode(), codec.encode(e), None) for e in events]
    bad = [malformed(i, codec) for i in range(BAD)]
    mixed = good + bad
    random.Random(7).shuffle(mixed)
    kit.produce_raw((k, v) for k, v, _ in mixed)

    router = kit.start_thread("r1", max_record_bytes=MAX_BYTES)
    kit.wait_committed(GOOD + BAD)
    thread = kit.threads[0][1]
    assert thread.is_alive() and not thread.errors
    totals = router.totals
    kit.stop_all()
    assert (totals.offered, totals.routed, totals.dead_lettered) == (GOOD + BAD, GOOD, BAD)

    routed = kit.read_routed(GOOD)
    kit.verify(routed, events, {"r1"})

    # the input as the broker stored it: (partition, offset) -> (key, value)
    stored = {
        (m.partition(), m.offset()): (m.key(), m.value()) for m in kit.read_topic(kit.input, GOOD + BAD)
    }
    dlq = kit.read_topic(kit.layout.name("dead_letter"), BAD)
    assert len(dlq) == BAD
    expected = Counter((k, v, reason) for k, v, reason in bad)
    seen = Counter()
    positions = set()
    for m in dlq:
        h = {k: v.decode() for k, v in m.headers()}
        assert h["ballast.source.topic"] == kit.input
        assert h["ballast.router.id"] == "r1"
        assert h["ballast.error.detail"]
        pos = (int(h["ballast.source.partition"]), int(h["ballast.source.offset"]))
        assert stored[pos] == (m.key(), m.value()), "headers must point at the original record"
        positions.add(pos)
        seen[(m.key(), m.value(), h["ballast.error.reason"])] += 1
    assert seen == expected
    assert len(positions) == BAD
