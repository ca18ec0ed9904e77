"""The partition stage's exactly-once batch: one Kafka transaction per task, fenced per partition.

Each task (one routed partition, one batch) writes, in **one transaction** of the producer whose
``transactional.id`` is ``job-stage-partition``: the batch's changelog entries and tombstones, the
meta record (batch id, max event time: :mod:`bench.reduce.partition_changelog`) and the closed
windows. A ``read_committed`` reader of the output sees each window once: a batch that crashed
before its commit is aborted and rerun; a batch that committed and is rerun (Spark replays a batch
its commit log lacks) finds its batch id in the committed changelog and writes nothing.

The producer lives in the host's agent (:mod:`bench.reduce.partition_agent`), not in the Python
worker: a partition that changes worker keeps its producer. The task opens a session (a new
generation: an older attempt's commit is refused), folds, and hands the agent the whole batch.

Which state a task starts from. The local file (:mod:`bench.reduce.partition_store`) is a cache of
the changelog; it records the changelog's end just past its own commit (the last record's offset +
2: the commit marker follows it, and no other producer can write this partition while this one
holds the fence) and which producer instance committed it. The task trusts the cache only when the
changelog still ends there and the file is the agent's current producer's own commit. Otherwise
(another host took the partition, a crash between commit and file, a new host, a new agent) it
reads the committed changelog from the file's end (or from the start) to its end; a new producer's
``init_transactions`` has fenced every earlier writer and aborted their open transaction first. A
file ahead of the changelog is not this changelog's (a topic recreated under it) and is discarded.

What this does not cover: a producer fenced by another host that has not written yet still passes
the check; its commit then fails with a fatal fenced error, the agent drops it, the task fails, and
Spark's retry opens a new producer.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from bench.reduce import partition_agent_client, partition_store
from bench.reduce.partition_changelog import (
    META_KEY,
    apply_records,
    entry_records,
    meta_value,
)
from bench.reduce.partition_fold import PartitionState, Step, closed_rows, fold

SETTLE_S = 10.0  # how long the changelog's end may lag a commit this process saw (markers pending)
READ_S = 120.0


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


def open_session(cfg: Any, partition: int) -> partition_agent_client.Session:
    """A session with the agent for ``partition``'s producer (opened, and fencing, if new)."""
    config = cfg.kafka.producer(**{"linger.ms": 5, "transactional.id": transactional_id(cfg.job, partition)})
    return partition_agent_client.open_session(cfg.kafka.bootstrap_servers, cfg.job, config, cfg.state_dir)


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


def start_state(cfg: Any, partition: int) -> tuple[PartitionState, partition_agent_client.Session, str]:
    """The partition's committed state and a session holding its fence; how it was had
    (``cache``: the agent's producer's own last commit; ``restored``: read from the changelog)."""
    ends, reader = _consumer(cfg, "read_uncommitted"), _consumer(cfg)
    topic = cfg.changelog_topic
    session = open_session(cfg, partition)
    PHASE_MS["init"] = session.init_ms
    try:
        stored = partition_store.load_stored(cfg.state_dir, partition)
        if stored is not None and stored.changelog_end >= 0:
            end = _settled_end(ends, topic, partition, stored.changelog_end)
            if stored.writer == session.token and end == stored.changelog_end:
                return stored.state, session, "cache"
            if end < stored.changelog_end:
                stored = None  # ahead of the changelog: not this changelog's state
        end = changelog_end(ends, topic, partition)
        known = stored is not None and stored.changelog_end >= 0
        base, start = (stored.state, stored.changelog_end) if known else (PartitionState(), 0)
        records = read_committed(reader, topic, partition, start, end) if end > start else []
        return apply_records(base, records), session, "restored"
    except BaseException:
        session.close()
        raise


def batch_writes(cfg: Any, partition: int, new: PartitionState, step: Step, encode_windows: Any) -> list:
    """The batch's transaction as the agent takes it: the changelog records (entries, tombstones,
    the meta record last) to the partition, then the closed windows to the output topic."""
    changelog = [*entry_records(step.changed, step.removed), (META_KEY, meta_value(new))]
    rows = closed_rows(step.closed, cfg.window_ms)
    windows = list(encode_windows(cfg, rows)) if len(rows) else []
    return [(cfg.changelog_topic, partition, changelog), (cfg.output_topic, None, windows)]


def run_batch(
    cfg: Any,
    partition: int,
    batch_id: int,
    watermark_ms: int,
    columns: tuple[np.ndarray, np.ndarray, np.ndarray],
    encode_windows: Any,
) -> tuple[PartitionState, Step | None, int, str]:
    """One partition's batch, exactly once: (state after it, its step or None for a batch already
    committed, changelog records sent, how the state was had)."""
    PHASE_MS.clear()
    t0 = time.perf_counter()
    state, session, how = start_state(cfg, partition)
    try:
        t1 = time.perf_counter()
        PHASE_MS["start"] = (t1 - t0) * 1000
        if batch_id <= state.batch_id:
            return state, None, 0, how
        new, step = fold(state, batch_id, *columns, watermark_ms, cfg.window_ms)
        writes = batch_writes(cfg, partition, new, step, encode_windows)
        t2 = time.perf_counter()
        last = session.commit(writes)
        if last < 0:
            raise RuntimeError(f"changelog of partition {partition}: the commit wrote no changelog record")
        end = last + 2  # the commit marker follows our last record
        t3 = time.perf_counter()
        partition_store.save(cfg.state_dir, partition, new, end, session.token)
    finally:
        session.close()
    PHASE_MS.update(fold=(t2 - t1) * 1000, commit=(t3 - t2) * 1000, save=(time.perf_counter() - t3) * 1000)
    return new, step, len(writes[0][2]), how
