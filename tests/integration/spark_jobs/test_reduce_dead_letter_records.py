"""A reduce dead letter carries the record it refuses: it outlives the routed topic's copy.

The routed topic keeps the broker's default retention (7 days), the dead-letter topic 30 days. The
routed topic is written here (as routers would have) with a few records the job must refuse: one
from a router of an older release (envelope v3, which does not refuse them itself) whose clock runs
hours ahead (``future``), two not routed to their owner (``misrouted``, one of them
written by a router of an older release, envelope v2) and a marker in the wrong partition
(``misdirected-marker``), among good records. Once the job has read everything it is stopped and
every record of the routed topic is deleted (``delete_records``); each dead letter must still
decode to the very record it refused (every field, the older version's through Avro's
resolution) and say where that record was and why.
"""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from ballast.avro.codec import AvroCodec
from ballast.kafka.clients import make_producer
from ballast.kafka.dead_letters import DeadLetter
from ballast.kafka.reading import read_topic
from ballast.routing.murmur2 import kafka_partition
from ballast.workload import flush_event
from tests.support.old_formats import ENVELOPE_VERSIONS, envelope_value
from tests.support.reduce_kit import INPUT_PARTITIONS, WORKERS, ReduceKit, reduce_events

JOB = "letters"
CURRENT = ENVELOPE_VERSIONS[-1]


def test_a_dead_letter_keeps_its_record_after_the_routed_topic_lost_it(kafka_config, tmp_path) -> None:
    kit = ReduceKit(kafka_config, f"letters-{tmp_path.name}", tmp_path / "stack")
    try:
        routed = kit.layout.name("routed")
        producer = make_producer(kafka_config.with_client_id("routers"))
        where: dict[str, tuple[int, int]] = {}  # record name -> (routed partition, offset)

        def send(worker: int, key: str, value: bytes, name: str = "") -> None:
            def delivered(err: Any, msg: Any) -> None:
                assert err is None, err
                where[name] = (msg.partition(), msg.offset())

            producer.produce(routed, value, key.encode(), worker, on_delivery=delivered if name else None)

        offsets = dict.fromkeys(range(INPUT_PARTITIONS), 0)

        def record(e: dict[str, Any], version: int = CURRENT, worker: int | None = None) -> dict[str, Any]:
            p = kafka_partition(e["key"].encode(), INPUT_PARTITIONS)
            fields = {
                **e, "epoch": 0, "router_id": f"r-v{version}", "source_topic": kit.input,
                "source_partition": p, "source_offset": offsets[p],
            }  # fmt: skip
            offsets[p] += 1
            home = kafka_partition(e["key"].encode(), WORKERS)
            return fields | {"worker": home if worker is None else worker}

        covers = [{"topic": kit.input, "partition": p, "event_time": None} for p in range(INPUT_PARTITIONS)]
        marker = {"epoch": 0, "router_id": "r-v4", "marker_time": 1, "covers": covers, "shed": []}
        for w in range(WORKERS):
            send(w, "", envelope_value(CURRENT, "EpochMarker", {**marker, "worker": w}))
        events = reduce_events(400, num_keys=50)
        refused: dict[str, tuple[int, str, dict[str, Any]]] = {}  # name -> (version, branch, fields)
        ahead = {**events[0], "key": "from-the-future", "event_time": int(time.time() * 1000) + 3 * 3_600_000}

        def elsewhere(e: dict[str, Any]) -> int:
            return (kafka_partition(e["key"].encode(), WORKERS) + 1) % WORKERS

        specials = {  # written (again) beside the event of that index
            100: ("future", 3, record(ahead, version=3)),
            200: ("misrouted", CURRENT, record(events[1], worker=elsewhere(events[1]))),
            300: ("misrouted-v2", 2, record(events[2], version=2, worker=elsewhere(events[2]))),
        }
        for i, e in enumerate(events):
            if i in specials:
                name, version, fields = specials[i]
                worker = fields.pop("worker")
                refused[name] = (version, "DataRecord", fields)
                send(worker, fields["key"], envelope_value(version, "DataRecord", fields), name)
            fields = record(e)
            send(fields.pop("worker"), e["key"], envelope_value(CURRENT, "DataRecord", fields))
        stray = {**marker, "worker": 5, "router_id": "r-stray"}  # a marker for worker 5, in partition 2
        refused["misdirected-marker"] = (CURRENT, "EpochMarker", stray)
        send(2, "", envelope_value(CURRENT, "EpochMarker", stray), "misdirected-marker")
        flush = record(flush_event(events[-1]["event_time"], ahead_ms=5_000))
        send(flush.pop("worker"), flush["key"], envelope_value(CURRENT, "DataRecord", flush))
        assert producer.flush(60) == 0 and set(where) == set(refused)

        kit.start_job(JOB, "aggregate:size=1s", "--watermark-delay", "2 seconds")
        kit.pipe.wait_reduce_settled(JOB, timeout=600, watch=[kit.jobs[JOB]])
        assert len(kit.dead_letters()) == len(refused)
        kit.pipe.stop(kit.jobs[JOB])

        admin = AdminClient(kafka_config.admin())
        ends = kit.pipe.routed_ends()
        deleting = admin.delete_records([TopicPartition(routed, p, end) for p, end in ends.items()])
        for future in deleting.values():
            future.result(timeout=60)
        assert read_topic(kafka_config, routed, idle=1.0, timeout=60) == []  # the routed copies are gone

        letters = {}
        for m in kit.dead_letters():
            letter = DeadLetter.of(m)
            assert (letter.topic, letter.job) == (routed, JOB)
            letters[(letter.partition, letter.offset)] = letter
        assert set(letters) == set(where.values())
        codec = AvroCodec("io.ballast.RoutedEnvelope")
        for name, (version, branch, fields) in refused.items():
            letter = letters[where[name]]
            assert letter.reason == name.removesuffix("-v2"), (name, letter.reason, letter.detail)
            assert letter.value == envelope_value(version, branch, fields)  # the record's own bytes
            kind, decoded = codec.decode(letter.value)["body"]
            assert kind == f"io.ballast.{branch}"
            assert {k: decoded[k] for k in fields} == fields
    finally:
        kit.close()
