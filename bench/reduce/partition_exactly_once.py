"""The partition stage's exactly-once batch: one Kafka transaction per task, fenced per partition.

Each task (one routed partition, one batch) writes, in **one transaction** of a producer whose
``transactional.id`` is ``job-stage-partition``: the batch's changelog entries and tombstones, the
meta record (batch id, max event time: :mod:`bench.reduce.partition_changelog`) and the closed
windows. A ``read_committed`` reader of the output sees each window once: a batch that crashed
before its commit is aborted and rerun; a batch that committed and is rerun (Spark replays a batch
its commit log lacks) finds its batch id in the committed changelog and writes nothing.

Which state a task starts from. The local file (:mod:`bench.reduce.partition_store`) is a cache of
the changelog; it records the changelog's end just past its own commit (the last record's offset +
2: the commit marker follows it, and no other producer can write this partition while this one
holds the fence) and which producer instance committed it. The task trusts the cache, and its
cached producer, only when the changelog still ends there and the file is this producer's own
commit. Otherwise (another Python worker or host took the partition, a crash between commit and
file, a new host, a zombie) it opens a new producer, whose ``init_transactions`` fences every
earlier writer of the partition and aborts their open transaction, then reads the committed
changelog from the file's end (or from the start) to its end. A file ahead of the changelog is
not this changelog's (a topic recreated under it) and is discarded.

What this does not cover: a producer fenced by another that has not written yet still passes the
check; its commit then fails with a fatal fenced error, the task fails, and Spark's retry opens a
new producer. The cost of a partition changing hands is one ``init_transactions`` and a short
read; ``bench/reduce`` measures it.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from itertools import chain
from typing import Any

import numpy as np

from bench.reduce import partition_store
from bench.reduce.partition_changelog import (
    META_KEY,
    apply_records,
    entry_records,
    meta_value,
    produce_records,
)
from bench.reduce.partition_fold import PartitionState, Step, closed_rows, fold

FLUSH_S = 60.0
SETTLE_S = 10.0  # how long the changelog's end may lag a commit this process saw (markers pending)
READ_S = 120.0


@dataclass
class Owner:
    """This process's transactional producer for one partition, and a token naming the instance."""

    producer: Any
    token: str


_OWNERS: dict[tuple[str, int], Owner] = {}
PHASE_MS: dict[str, float] = {}  # the last task's time per phase (the stage logs them)
_CONSUMERS: dict[tuple[str, str, str], Any] = {}


def transactional_id(job: str, partition: int) -> str:
    return f"{job}-stage-{partition}"


def _consumer(cfg: Any, isolation: str = "read_committed") -> Any:
    """This process's consumer of the changelog: ``read_committed`` to rebuild a state,
    ``read_uncommitted`` to ask for its end. Why two: librdkafka answers an end query with the
    isolation level's end, and the stable end stops before a transaction whose commit markers are
    not written yet, so a batch that committed just before a crash would look unwritten."""
    from confluent_kafka import Consumer

    key = (cfg.kafka.bootstrap_servers, cfg.changelog_topic, isolation)
    if key not in _CONSUMERS:
        _CONSUMERS[key] = Consumer(cfg.kafka.consumer(f"{cfg.job}-stage-restore", **{
            "isolation.level": isolation, "enable.partition.eof": True}))  # fmt: skip
    return _CONSUMERS[key]


def _new_owner(cfg: Any, partition: int) -> Owner:
    """A new producer for ``partition``: its ``init_transactions`` fences every earlier one."""
    from confluent_kafka import Producer

    key = (cfg.changelog_topic, partition)
    _OWNERS.pop(key, None)
    producer = Producer(
        cfg.kafka.producer(**{"linger.ms": 5, "transactional.id": transactional_id(cfg.job, partition)})
    )
    producer.init_transactions(FLUSH_S)
    owner = Owner(producer, uuid.uuid4().hex)
    _OWNERS[key] = owner
    return owner


def changelog_end(consumer: Any, topic: str, partition: int) -> int:
    """The partition's high watermark: every record written, committed or not (``consumer`` reads
    uncommitted)."""
    from confluent_kafka import TopicPartition

    _low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10, cached=False)
    return int(high)


def read_committed(
    consumer: Any, topic: str, partition: int, start: int, end: int
) -> list[tuple[bytes, Any]]:
    """The committed records of ``[start, end)`` in offset order (aborted ones skipped)."""
    from confluent_kafka import KafkaError, TopicPartition

    tp = TopicPartition(topic, partition, start)
    consumer.assign([tp])
    records: list[tuple[bytes, Any]] = []
    deadline = time.monotonic() + READ_S
    at = start  # the next offset to read: past a record read, or where the broker said the end is
    try:
        while True:
            at = max(at, consumer.position([TopicPartition(topic, partition)])[0].offset)
            if at >= end:
                return records
            if time.monotonic() > deadline:
                raise TimeoutError(f"changelog {topic}[{partition}]: at {at} of {end} after {READ_S:.0f} s")
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    at = max(at, msg.offset())  # control records and aborted ones end the partition here
                    continue
                raise RuntimeError(f"changelog {topic}[{partition}]: {msg.error()}")
            records.append((msg.key(), msg.value()))
            at = max(at, msg.offset() + 1)
    finally:
        consumer.unassign()


def _settled_end(consumer: Any, topic: str, partition: int, expected: int) -> int:
    """The changelog's end, waiting up to :data:`SETTLE_S` for it to reach ``expected``."""
    deadline = time.monotonic() + SETTLE_S
    end = changelog_end(consumer, topic, partition)
    while end < expected and time.monotonic() < deadline:
        time.sleep(0.05)
        end = changelog_end(consumer, topic, partition)
    return end


def start_state(cfg: Any, partition: int) -> tuple[PartitionState, Owner, str]:
    """The partition's committed state and a producer holding its fence; how it was had
    (``cache``: this producer's own last commit; ``restored``: read from the changelog)."""
    ends, reader = _consumer(cfg, "read_uncommitted"), _consumer(cfg)
    topic = cfg.changelog_topic
    stored = partition_store.load_stored(cfg.state_dir, partition)
    owner = _OWNERS.get((topic, partition))
    if stored is not None and stored.changelog_end >= 0:
        end = _settled_end(ends, topic, partition, stored.changelog_end)
        if owner is not None and stored.writer == owner.token and end == stored.changelog_end:
            return stored.state, owner, "cache"
        if end < stored.changelog_end:
            stored = None  # ahead of the changelog: not this changelog's state
    t0 = time.perf_counter()
    owner = _new_owner(cfg, partition)
    PHASE_MS["init"] = (time.perf_counter() - t0) * 1000
    end = changelog_end(ends, topic, partition)
    known = stored is not None and stored.changelog_end >= 0
    base, start = (stored.state, stored.changelog_end) if known else (PartitionState(), 0)
    state = (
        apply_records(base, read_committed(reader, topic, partition, start, end)) if end > start else base
    )
    return state, owner, "restored"


def commit_batch(
    cfg: Any, partition: int, owner: Owner, new: PartitionState, step: Step, send_windows: Any
) -> int:
    """Write the batch's changelog records, meta record and closed windows in one transaction;
    returns the changelog's end just past the commit."""
    producer = owner.producer
    failed: list[str] = []
    last = [-1]

    def on_changelog(err: Any, msg: Any) -> None:
        if err is not None:
            failed.append(str(err))
        else:
            last[0] = max(last[0], msg.offset())

    def on_window(err: Any, _msg: Any) -> None:
        if err is not None:
            failed.append(str(err))

    try:
        producer.begin_transaction()
        records = chain(entry_records(step.changed, step.removed), [(META_KEY, meta_value(new))])
        produce_records(producer, cfg.changelog_topic, partition, records, on_changelog)
        rows = closed_rows(step.closed, cfg.window_ms)
        if len(rows):
            send_windows(producer, cfg, rows, on_window)
        producer.commit_transaction(FLUSH_S)
    except Exception:
        _OWNERS.pop((cfg.changelog_topic, partition), None)  # fenced or failed: the next task opens anew
        raise
    if failed or last[0] < 0:
        raise RuntimeError(
            f"changelog of partition {partition}: committed, but {failed[:3]} (last {last[0]})"
        )
    return last[0] + 2  # the commit marker follows our last record


def run_batch(
    cfg: Any,
    partition: int,
    batch_id: int,
    watermark_ms: int,
    columns: tuple[np.ndarray, np.ndarray, np.ndarray],
    send_windows: Any,
) -> tuple[PartitionState, Step | None, int, str]:
    """One partition's batch, exactly once: (state after it, its step or None for a batch already
    committed, changelog records sent, how the state was had)."""
    PHASE_MS.clear()
    t0 = time.perf_counter()
    state, owner, how = start_state(cfg, partition)
    t1 = time.perf_counter()
    PHASE_MS["start"] = (t1 - t0) * 1000
    if batch_id <= state.batch_id:
        return state, None, 0, how
    new, step = fold(state, batch_id, *columns, watermark_ms, cfg.window_ms)
    t2 = time.perf_counter()
    end = commit_batch(cfg, partition, owner, new, step, send_windows)
    t3 = time.perf_counter()
    partition_store.save(cfg.state_dir, partition, new, end, owner.token)
    PHASE_MS.update(fold=(t2 - t1) * 1000, commit=(t3 - t2) * 1000, save=(time.perf_counter() - t3) * 1000)
    return new, step, len(step.changed) + len(step.removed) + 1, how
