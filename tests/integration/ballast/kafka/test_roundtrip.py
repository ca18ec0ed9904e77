"""Acceptance 1: a real-broker round trip of 100,000 Avro records: all received, none duplicated,
content equal (compared with what the test itself generated, not with anything the codec says)."""

from __future__ import annotations

from collections import Counter

from ballast.avro.codec import AvroCodec
from ballast.kafka.clients import make_consumer, make_producer, produce_all
from ballast.kafka.reading import read_until_idle
from ballast.workload import input_events

N = 100_000


def test_100k_avro_records_round_trip(kafka_config, topic_factory, unique):
    topic = topic_factory("roundtrip", partitions=4)
    codec = AvroCodec("io.ballast.InputEvent")
    events = list(input_events(N, num_keys=5_000, z=1.0, seed=3))
    sent = produce_all(
        make_producer(kafka_config), topic, ((e["key"].encode(), codec.encode(e)) for e in events)
    )
    assert sent == N

    consumer = make_consumer(kafka_config, unique("g"))
    consumer.subscribe([topic])
    msgs = read_until_idle(consumer, N, timeout=180, idle=20)
    # read a little longer: a duplicate would arrive after the N-th record
    msgs += read_until_idle(consumer, 1, idle=None, timeout=3)
    consumer.close()

    decoded = [codec.decode(m.value(), m.topic(), m.partition(), m.offset()) for m in msgs]
    # every payload starts with the record's sequence number: count each one
    seqs = Counter(int.from_bytes(d["payload"][:8], "big") for d in decoded)
    assert len(msgs) == N, f"received {len(msgs)} of {N}"
    assert set(seqs) == set(range(N)) and max(seqs.values()) == 1
    by_seq = {int.from_bytes(d["payload"][:8], "big"): d for d in decoded}
    assert all(by_seq[i] == events[i] for i in range(N))
    # Kafka key = event key, and every key stays in one partition (murmur2 is deterministic)
    partitions_of_key: dict[bytes, set[int]] = {}
    for m in msgs:
        partitions_of_key.setdefault(m.key(), set()).add(m.partition())
    assert all(len(p) == 1 for p in partitions_of_key.values())
