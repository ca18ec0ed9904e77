"""The partition stage's task: one routed partition's records of one batch, in a Spark Python worker.

Runs inside ``mapInArrow`` (one task per Kafka partition, no exchange): read the partition's
state (:mod:`bench.reduce.partition_store`), fold the batch in
(:func:`bench.reduce.partition_fold.fold`), send every changed entry (and a tombstone for every
closed window) to the compacted changelog topic and wait for the broker's acks, save the state,
then give the closed windows and one *stats* row (key null: the partition's max event time, late
records, its oldest open window) to the driver. With ``output_topic`` set the task writes the closed
windows itself, with the producer it already holds (:func:`send_windows`), and gives the driver the
stats row only: one Spark job a batch, no cache, no JVM encoder or sink. With ``exactly_once`` the
changelog and the windows go out in one Kafka transaction instead
(:mod:`bench.reduce.partition_exactly_once`), and a batch already committed writes nothing.

Why the changelog is sent before the state file is replaced: a crash in between replays the batch
from the previous state, and sends the same entries again, which compaction keeps once. Why here
and not on the driver: that is where a recoverable design pays it, per partition, in parallel.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ballast.kafka.configuration import KafkaConfig
from bench.reduce import partition_exactly_once, partition_store
from bench.reduce.partition_changelog import entry_records, produce_records
from bench.reduce.partition_fold import NO_EVENT, closed_rows, fold, open_min_end

OUTPUT_DDL = (
    "partition int, key string, window_start long, window_end long, count long, sum double, "
    "min double, max double, mean double, max_event_ms long, late long, open_min_end long, "
    "state_rows long, changelog long, fold_ms double, worker_pid long, cache_reads long, restored boolean, "
    "phase_ms string"
)
OUTPUT = pa.schema(
    [
        ("partition", pa.int32()),
        ("key", pa.string()),
        ("window_start", pa.int64()),
        ("window_end", pa.int64()),
        ("count", pa.int64()),
        ("sum", pa.float64()),
        ("min", pa.float64()),
        ("max", pa.float64()),
        ("mean", pa.float64()),
        ("max_event_ms", pa.int64()),
        ("late", pa.int64()),
        ("open_min_end", pa.int64()),
        ("state_rows", pa.int64()),
        ("changelog", pa.int64()),
        ("fold_ms", pa.float64()),
        ("worker_pid", pa.int64()),
        ("cache_reads", pa.int64()),  # this worker's loads answered from memory so far
        ("restored", pa.bool_()),  # exactly once: the state was read from the changelog, not the cache
        ("phase_ms", pa.string()),  # exactly once: JSON of the task's time per phase
    ]
)
FLUSH_S = 60.0

_PRODUCERS: dict[tuple[str, str], Any] = {}


@dataclass(frozen=True)
class TaskConfig:
    state_dir: str
    window_ms: int
    kafka: KafkaConfig
    changelog_topic: str
    output_topic: str = ""  # set: the task writes the closed windows (else the driver's Kafka sink)
    job: str = ""  # the windows' job name, as the native query writes it
    exactly_once: bool = False  # one transaction per task (bench.reduce.partition_exactly_once)


def _producer(cfg: TaskConfig) -> Any:
    from confluent_kafka import Producer

    key = (cfg.kafka.bootstrap_servers, cfg.changelog_topic)
    if key not in _PRODUCERS:
        _PRODUCERS[key] = Producer(cfg.kafka.producer(**{"linger.ms": 5}))
    return _PRODUCERS[key]


def send_changelog(cfg: TaskConfig, partition: int, changed: Any, removed: Any, windows: Any = None) -> int:
    """Every changed entry and a tombstone per removed one, to the changelog's partition
    ``partition`` (and the closed ``windows`` to the output topic, when the task writes them);
    returns once the broker acknowledged them all (raises otherwise)."""
    producer = _producer(cfg)
    failed: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            failed.append(str(err))

    if windows is not None and len(windows):
        send_windows(producer, cfg, windows, on_delivery)

    records = entry_records(changed, removed)
    n = produce_records(producer, cfg.changelog_topic, partition, records, on_delivery)
    left = producer.flush(FLUSH_S)
    if left or failed:
        raise RuntimeError(f"changelog of partition {partition}: {left} not sent, {len(failed)} failed "
                           f"({failed[:3]})")  # fmt: skip
    return n


def window_record(job: str, key: str, start: int, end: int, count: int, total: float, lo: float,
                  hi: float, mean: float) -> dict[str, Any]:  # fmt: skip
    """An ``OutputResult`` as :func:`bench.reduce.native.output_rows` builds it in the JVM."""
    c = float(count)
    return {
        "key": key, "job": job, "window_start": start, "window_end": end, "count": count, "sum": total,
        "min": lo, "max": hi, "mean": mean, "values": [], "worker": -1, "epoch": 0, "revision": 0,
        "excluded_records": 0, "keep_probability": 1.0, "estimated_count": c, "relative_error": 0.0,
        "exact": True, "sampled_records": 0, "estimated_sum": total, "count_std_error": 0.0,
        "sum_std_error": 0.0, "count_low": c, "count_high": c, "sum_low": total, "sum_high": total,
        "min_max_are_bounds": False,
    }  # fmt: skip


def window_records(cfg: TaskConfig, rows: Any) -> Iterator[tuple[bytes, bytes]]:
    """The closed windows as output records (key, Avro value), keyed ``job:start:end:key`` as the
    native query keys them."""
    from ballast.avro.codec import AvroCodec

    codec = AvroCodec("io.ballast.OutputResult")
    columns = zip(
        rows["key"].to_numpy(dtype=object), rows["window_start"].to_numpy(dtype=np.int64),
        rows["window_end"].to_numpy(dtype=np.int64), rows["count"].to_numpy(dtype=np.int64),
        rows["sum"].to_numpy(dtype=np.float64), rows["min"].to_numpy(dtype=np.float64),
        rows["max"].to_numpy(dtype=np.float64), rows["mean"].to_numpy(dtype=np.float64), strict=True,
    )  # fmt: skip
    for key, start, end, count, total, lo, hi, mean in columns:
        value = codec.encode(window_record(cfg.job, key, int(start), int(end), int(count), float(total),
                                           float(lo), float(hi), float(mean)))  # fmt: skip
        yield f"{cfg.job}:{start}:{end}:{key}".encode(), value


def send_windows(producer: Any, cfg: TaskConfig, rows: Any, on_delivery: Any) -> int:
    """The closed windows to ``cfg.output_topic`` with ``producer``; the caller's flush waits for
    their acks."""
    n = 0
    for n, (key, value) in enumerate(window_records(cfg, rows), 1):
        producer.produce(cfg.output_topic, value, key, on_delivery=on_delivery)
        if n % 10_000 == 0:
            producer.poll(0)
    return n


def run_task(
    cfg: TaskConfig, batch_id: int, watermark_ms: int, batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """The ``mapInArrow`` function: input (partition, key, value, t); output :data:`OUTPUT`."""
    started = time.perf_counter()
    table = pa.Table.from_batches(list(batches))
    if table.num_rows == 0:
        return  # no partition to speak for: the driver closes idle partitions' windows
    parts = pc.unique(table["partition"]).to_pylist()
    if len(parts) != 1:
        raise RuntimeError(f"a task read several Kafka partitions {parts}: the stage needs one per task")
    partition = int(parts[0])
    data = table.filter(pc.is_valid(table["key"]))  # the driver's idle-partition ticks have no key
    keys = data["key"].to_numpy(zero_copy_only=False)
    values = data["value"].to_numpy(zero_copy_only=False)
    times = data["t"].to_numpy(zero_copy_only=False).astype(np.int64)
    restored = None
    if cfg.exactly_once:
        new, done, sent, how = partition_exactly_once.run_batch(
            cfg, partition, batch_id, watermark_ms, (keys, values, times), window_records
        )
        restored = how == "restored"
        late = done.late if done is not None else (new.last_late if new.batch_id == batch_id else 0)
        yield _stats(cfg, partition, new, new.max_event_ms, late, sent, started, restored)
        return
    state = partition_store.load(cfg.state_dir, partition)
    new, step = fold(state, batch_id, keys, values, times, watermark_ms, cfg.window_ms)
    sent = 0
    rows = closed_rows(step.closed, cfg.window_ms)
    if not step.replay:
        sent = send_changelog(cfg, partition, step.changed, step.removed, rows if cfg.output_topic else None)
        partition_store.save(cfg.state_dir, partition, new)
    elif cfg.output_topic and len(rows):  # a replay changes nothing, and gives its closed windows again
        send_changelog(cfg, partition, step.changed, step.removed, rows)
    n = 0 if cfg.output_topic else len(rows)
    if n:
        yield pa.RecordBatch.from_pydict(
            {
                "partition": np.full(n, partition, dtype=np.int32),
                "key": rows["key"].to_numpy(dtype=object),
                "window_start": rows["window_start"].to_numpy(dtype=np.int64),
                "window_end": rows["window_end"].to_numpy(dtype=np.int64),
                "count": rows["count"].to_numpy(dtype=np.int64),
                "sum": rows["sum"].to_numpy(dtype=np.float64),
                "min": rows["min"].to_numpy(dtype=np.float64),
                "max": rows["max"].to_numpy(dtype=np.float64),
                "mean": rows["mean"].to_numpy(dtype=np.float64),
                **{c: pa.nulls(n, OUTPUT.field(c).type) for c in OUTPUT.names[9:]},
            },
            schema=OUTPUT,
        )
    yield _stats(cfg, partition, new, step.max_event_ms, step.late, sent, started, restored)


def _stats(cfg: TaskConfig, partition: int, new: Any, max_event_ms: int, late: int, sent: int, started: float,
           restored: bool | None) -> pa.RecordBatch:  # fmt: skip
    """The task's one stats row (key null): what the driver needs for the watermark and idle partitions."""
    phases = partition_exactly_once.PHASE_MS
    stats = {c: pa.nulls(1, OUTPUT.field(c).type) for c in OUTPUT.names}
    stats |= {
        "partition": pa.array([partition], pa.int32()),
        "max_event_ms": pa.array([max_event_ms if max_event_ms != NO_EVENT else None], pa.int64()),
        "late": pa.array([late], pa.int64()),
        "open_min_end": pa.array([open_min_end(new, cfg.window_ms)], pa.int64()),
        "state_rows": pa.array([len(new.table)], pa.int64()),
        "changelog": pa.array([sent], pa.int64()),
        "fold_ms": pa.array([(time.perf_counter() - started) * 1000], pa.float64()),
        "worker_pid": pa.array([os.getpid()], pa.int64()),
        "cache_reads": pa.array([partition_store.READS["cache"]], pa.int64()),
        "restored": pa.array([restored], pa.bool_()),
        "phase_ms": pa.array([json.dumps(phases) if cfg.exactly_once else None], pa.string()),
    }
    return pa.RecordBatch.from_pydict(stats, schema=OUTPUT)
