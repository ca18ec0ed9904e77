"""A reduce dead letter carries the record it refuses: read back from the routed topic by offset.

Why: a dead letter that only names the record's position outlives the record (the routed topic
keeps the broker's default, 7 days; the dead-letter topic 30), so after a week it could not be
replayed or even looked at. The letter's value is therefore the routed record itself, its exact
bytes (whatever envelope version wrote it).

Why read back, not carried: a data row crosses to the worker's Python as typed columns only
(docs/reduce.md, "Dead letters and poison pills": carrying every row's bytes across would cost
each record on the hot path, measured there). A worker dead-letters few records, and those it has
just read: they are in its routed partition, at offsets it knows. So after a step, the records of
its dead letters (those without bytes: data records, markers, chunks; an undecodable row carries
its bytes already) are fetched from the routed topic, one seek per run of nearby offsets. A step
without dead letters costs nothing; a replayed step reads the same bytes (offsets do not change).

If a record cannot be read back (the broker does not answer in time, the record is gone), its
letter is written all the same, without a value, its detail saying why: nothing stops the job and
the letter still says where the record was.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any, Protocol

from spark_jobs.reduce.contract import DeadLetter

GAP = 10_000  # offsets further apart than this are reached by a new seek, not read through
TIMEOUT_S = 30.0  # how long one step may spend reading its dead letters' records back


class RecordReader(Protocol):
    def read(self, partition: int, offsets: Sequence[int]) -> dict[int, bytes | None]: ...


def runs(offsets: Iterable[int], gap: int = GAP) -> list[tuple[int, int]]:
    """Sorted distinct ``offsets`` as (first, last) ranges whose members are at most ``gap`` apart."""
    out: list[tuple[int, int]] = []
    for o in sorted(set(offsets)):
        if out and o - out[-1][1] <= gap:
            out[-1] = (out[-1][0], o)
        else:
            out.append((o, o))
    return out


def with_records(dead: list[DeadLetter], reader: RecordReader, partition: int) -> list[DeadLetter]:
    """``dead`` with each letter's record read back from routed ``partition`` where it has none."""
    wanted = [d.offset for d in dead if d.raw is None and d.offset >= 0]
    if not wanted:
        return dead
    why = "not found at its offset"
    try:
        found = reader.read(partition, wanted)
    except Exception as exc:  # a broker error must not stop the job: the letter goes out without it
        found, why = {}, f"{type(exc).__name__}: {exc}"
    out = []
    for d in dead:
        if d.raw is None and d.offset >= 0 and d.offset not in found:
            d = replace(d, detail=f"{d.detail} (the record could not be read back: {why})")
        elif d.raw is None and d.offset >= 0:
            d = replace(d, raw=found[d.offset])  # None for a record whose value is null
        out.append(d)
    return out


class RoutedRecords:
    """Reads records of one topic by partition and offset (read_committed, like the job's source)."""

    def __init__(self, kafka: Any, topic: str, timeout_s: float = TIMEOUT_S) -> None:
        from ballast.kafka.clients import make_consumer
        from ballast.kafka.identities import scratch_group

        self.topic = topic
        self.timeout_s = timeout_s
        client = kafka.with_client_id("ballast-reduce-letters")
        self.consumer = make_consumer(client, scratch_group("reduce-letters"))

    def read(self, partition: int, offsets: Sequence[int]) -> dict[int, bytes | None]:
        """The value at each of ``offsets`` that is there (None: a record with a null value)."""
        from confluent_kafka import KafkaError, KafkaException, TopicPartition

        wanted = set(offsets)
        found: dict[int, bytes | None] = {}
        deadline = time.monotonic() + self.timeout_s
        for first, last in runs(wanted):
            self.consumer.assign([TopicPartition(self.topic, partition, first)])
            done = False
            while not done:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{self.topic}[{partition}] offsets {first}..{last} not read in time")
                for m in self.consumer.consume(1_000, timeout=min(left, 0.5)):
                    err = m.error()
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF:
                            continue
                        raise KafkaException(err)
                    if m.offset() in wanted:
                        found[m.offset()] = m.value()
                    done = done or m.offset() >= last
        self.consumer.unassign()
        return found


_SHARED: dict[tuple[Any, str], RoutedRecords] = {}


def shared_records(kafka: Any, topic: str) -> RoutedRecords:
    """One reader per Python worker process and topic (Spark reuses its workers)."""
    key = (kafka.connection, topic)
    reader = _SHARED.get(key)
    if reader is None:
        reader = _SHARED[key] = RoutedRecords(kafka, topic)
    return reader
