"""The reduce job reads a routed topic written during a rolling upgrade: every ``RoutedEnvelope``
version at once, through a migration.

The routed topic is written here as the routers and the job of each release would have written it
(:func:`tests.support.old_formats.envelope_value`: each value with its own release's schema file):

* epoch 0: input partition p is routed by a router of version p + 1 (v1, v2, v3, v4), whose
  markers and data records are of its version (a v1 marker covers nothing: its release did not
  say which partitions a marker speaks for);
* a routing update (epoch 1) moves one key of each input partition and a fifth key, K3. The v1
  router has been replaced: the v4 router took its partition over (a v1 marker could not announce
  an epoch for it). The v2, v3 and v4 routers announce epoch 1 with markers of their versions, so
  an old owner's frontier passes epoch 1 only if it reads all three versions;
* K3's state left its old worker before this part of the topic: it is in flight as a state chunk
  written by a job of release 3 (built by the engine from K3's epoch-0 records, which are not in
  the topic), in pieces. Before it, the same move's chunk as v1 and v2 wrote it, with a wrong
  state: those releases' chunks name no job (the field came with v3), so they are no job's chunks
  and must be skipped, as another job's are (docs/reduce.md, "Live migration");
* epoch-1 records follow, then a flush record into every input partition and the markers a
  router of v4 writes when it commits (its progress: the highest event time it routed of each of
  its partitions), 3 s later. The v2 and v3 routers' partitions follow their records (they are
  *legacy*: their markers carry no event time), at each worker the records that reach it; a worker
  that none of a legacy partition's records reach holds that partition until the idle timeout
  (2 s of routed-log time here, docs/reduce.md "Envelope versions"), which the final markers pass.

Judged against the reference over every event (K3's epoch-0 events included, through the chunk):
every row exact, every moved key installed at its new owner from its old one, K3 from the v3
chunk (its size), and not one dead letter.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from ballast.control.state import make_event
from ballast.kafka.clients import make_producer
from ballast.routing.murmur2 import kafka_partition
from ballast.workload import FLUSH_KEY, flush_event
from spark_jobs.processors.spec import from_spec
from spark_jobs.reduce.ownership import OwnershipView
from tests.support import reduce_reference
from tests.support.engine_rows import Worker, data, marker
from tests.support.old_formats import envelope_value
from tests.support.output_judge import assert_rows_right, judge
from tests.support.reduce_kit import INPUT_PARTITIONS, WORKERS, ReduceKit, other_worker, reduce_events

JOB = "versions"
AGG = "aggregate:size=1s"
EVENTS = 6_000  # 3 s of event time (2 events a millisecond)
BEFORE = (1, 2, 3, 4)  # the version of input partition p's router at epoch 0
AFTER = (4, 2, 3, 4)  # ... at epoch 1: the v4 router took input partition 0 over


def routed_value(version: int, branch: str, **fields: Any) -> bytes:
    return envelope_value(version, branch, fields)


class RoutedWriter:
    """Writes the routed topic as routers and jobs of several releases would have."""

    def __init__(self, kit: ReduceKit) -> None:
        self.kit = kit
        self.topic = kit.layout.name("routed")
        self.producer = make_producer(kit.kafka.with_client_id("old-releases"))
        self.next_offset = Counter()  # input partition -> next source offset
        self.highest: dict[int, int] = {}  # input partition -> highest event time routed

    def send(self, worker: int, key: str, value: bytes) -> None:
        self.producer.produce(self.topic, value, key.encode(), worker)

    def markers(
        self, epoch: int, versions: tuple[int, ...], now_ms: int, taken_over: tuple[int, ...] = ()
    ) -> None:
        """Each router announces ``epoch`` in every routed partition, covering its input partitions
        (with the highest event time it routed of each: none yet of those it has just ``taken_over``)."""
        routers: dict[int, list[int]] = {}
        for p, v in enumerate(versions):
            routers.setdefault(v, []).append(p)
        for w in range(WORKERS):
            for v, parts in routers.items():
                covers = [
                    {"topic": self.kit.input, "partition": p,
                     "event_time": None if p in taken_over else self.highest.get(p)}
                    for p in parts
                ]  # fmt: skip
                value = routed_value(
                    v, "EpochMarker", epoch=epoch, router_id=f"r-v{v}", worker=w, marker_time=now_ms,
                    covers=covers, shed=[],
                )  # fmt: skip
                self.send(w, "", value)

    def record(
        self, event: dict[str, Any], epoch: int, worker: int, versions: tuple[int, ...],
        partition: int | None = None,
    ) -> None:  # fmt: skip
        p = kafka_partition(event["key"].encode(), INPUT_PARTITIONS) if partition is None else partition
        v = versions[p]
        value = routed_value(
            v, "DataRecord", key=event["key"], value=event["value"], payload=event["payload"],
            event_time=event["event_time"], epoch=epoch, router_id=f"r-v{v}", source_topic=self.kit.input,
            source_partition=p, source_offset=self.next_offset[p],
        )  # fmt: skip
        self.next_offset[p] += 1
        self.highest[p] = max(self.highest.get(p, event["event_time"]), event["event_time"])
        self.send(worker, event["key"], value)

    def chunk(self, version: int, c: Any, job: str) -> None:
        value = routed_value(
            version, "StateChunk", epoch=c.epoch, key=c.key, from_worker=c.from_worker, to_worker=c.to_worker,
            chunk_index=c.chunk_index, chunk_count=c.chunk_count, state=c.state, job=job,
        )  # fmt: skip
        self.send(c.to_worker, c.key, value)

    def flush(self) -> None:
        assert self.producer.flush(60) == 0


def shipped_chunks(key: str, events: list[dict[str, Any]], old: int, new: int, pins: dict[str, int]) -> list:
    """The chunk pieces a worker of the engine ships for ``key`` (old -> new at epoch 1) once it has
    folded ``events`` of epoch 0: what a job of an earlier release wrote (its state bytes are the
    engine's; only the envelope differs)."""
    view = OwnershipView(WORKERS)
    routed = WORKERS
    view.apply(make_event(0, "TABLE_SNAPSHOT", {"num_workers": routed, "table": {}, "keep_probability": {},
                                                "routed_partitions": routed}))  # fmt: skip
    view.apply(make_event(1, "ROUTING_UPDATE", {"assign": pins, "unassign": [], "reason": ""}))
    inputs = tuple(f"in:{p}" for p in range(INPUT_PARTITIONS))
    sender = Worker(old, view, from_spec(AGG), inputs, workers=WORKERS, chunk_bytes=40)
    sender.step([data(key, e["value"], e["event_time"], 0) for e in events])
    out = sender.step([marker(1, old, *inputs)])
    pieces = [c for c in out.chunks if c.key == key]
    assert len(pieces) > 1 and {(c.from_worker, c.to_worker, c.epoch) for c in pieces} == {(old, new, 1)}
    return pieces


def test_every_envelope_version_is_read_through_a_migration(kafka_config, tmp_path) -> None:
    kit = ReduceKit(kafka_config, f"versions-{tmp_path.name}", tmp_path / "stack")
    try:
        events = reduce_events(EVENTS, num_keys=300, per_ms=2)
        half = EVENTS // 2
        counts = Counter(e["key"] for e in events[:half])
        ranked = [k for k, _ in counts.most_common()]
        moved = [
            next(k for k in ranked if kafka_partition(k.encode(), INPUT_PARTITIONS) == p) for p in range(4)
        ]
        k3 = next(k for k in ranked if k not in moved)
        home = {k: kafka_partition(k.encode(), WORKERS) for k in [*moved, k3]}
        pins = {k: other_worker(k, ()) for k in [*moved, k3]}
        epoch = kit.assign(pins)
        assert epoch == 1

        writer = RoutedWriter(kit)
        now = events[0]["event_time"]
        writer.markers(0, BEFORE, now)
        for e in events[:half]:
            if e["key"] != k3:  # K3's epoch-0 records: folded before this part of the topic
                writer.record(e, 0, home.get(e["key"], kafka_partition(e["key"].encode(), WORKERS)), BEFORE)
        writer.markers(1, AFTER, now, taken_over=(0,))
        k3_early = [e for e in events[:half] if e["key"] == k3]
        pieces = shipped_chunks(k3, k3_early, home[k3], pins[k3], pins)
        wrong = shipped_chunks(
            k3, [{**e, "value": e["value"] + 100.0} for e in k3_early], home[k3], pins[k3], pins
        )
        for c in wrong:
            writer.chunk(1, c, JOB)
            writer.chunk(2, c, JOB)
        for c in pieces:
            writer.chunk(3, c, JOB)
        for e in events[half:]:
            writer.record(e, 1, pins.get(e["key"], kafka_partition(e["key"].encode(), WORKERS)), AFTER)
        flush = flush_event(events[-1]["event_time"], ahead_ms=5_000)
        for p in range(INPUT_PARTITIONS):  # the reduce's event time follows its slowest partition
            writer.record(flush, 1, kafka_partition(FLUSH_KEY.encode(), WORKERS), AFTER, partition=p)
        writer.flush()
        time.sleep(3)  # routed-log time past the idle timeout: legacy partitions no record reached
        writer.markers(1, AFTER, now)
        writer.flush()

        kit.start_job(JOB, AGG, "--watermark-delay", "2 seconds", "--idle-timeout", "2 seconds")
        kit.pipe.wait_reduce_settled(JOB, timeout=600, watch=[kit.jobs[JOB]])
        letters = [(d.reason, d.detail) for d in kit.dead_lettered()]
        assert letters == [], f"{len(letters)} dead letters, e.g. {letters[:3]}"

        expected = reduce_reference.expected_aggregates(events, 1000)
        kit.wait_results(JOB, expected, timeout=300)
        assert_rows_right(judge(kit.rows(JOB), expected, ignore_keys=[FLUSH_KEY]))

        stats = kit.worker_stats(JOB)
        frontier = {w: max(s.frontier_epoch for s in stats if s.worker == w) for w in range(WORKERS)}
        assert frontier == dict.fromkeys(range(WORKERS), 1)  # every old owner could ship
        installed = {(c.key, c.epoch): c for s in stats for c in s.chunks_installed}
        assert {(k, 1) for k in [*moved, k3]} <= set(installed)
        assert {k: installed[(k, 1)].worker for k in [*moved, k3]} == home
        assert installed[(k3, 1)].bytes == len(b"".join(c.state for c in pieces))
        # the job's own chunk for K3 (its sender held nothing of K3) came after the v3 one: a duplicate
        assert sum(s.duplicate_chunks for s in stats if s.worker == pins[k3]) >= 1
    finally:
        kit.close()
