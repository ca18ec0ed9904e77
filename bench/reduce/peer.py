"""The peer for per-key work: what a Spark expert writes for a per-key processor, and its process.

The query: Spark's Kafka source on the routed topic (the records every contender reads, in the
same batches), the data records decoded with ``from_avro``, a watermark on their event time, and
``groupBy(key)`` running the same processor as Ballast's workers (``spark_jobs.processors``) with
the same simulated cost per record (:mod:`spark_jobs.record_cost`), one group = one key, through
either of Spark's two per-key APIs (``--api``):

* ``tws``: ``transformWithStateInPandas``, a value state and an event-time timer per key; its
  state calls go through the task's state server (RocksDB only: it needs column families);
* ``apply``: ``applyInPandasWithState``, the key's state travelling with its rows through Arrow
  (no state server), an event-time timeout per key, on any store (``--store``).

Both return rows only when a window closes, as plain columns, and the JVM writes them with
``to_avro`` as the native query does. Not the placement bench's (a), which is what a naive user
writes (Python Avro per key, a load row per key).

Why ``--partitions`` is a knob: over-partitioning (P = 4 or 8 times the task slots) is Spark's own
remedy for skew: a hot key's partition is one task of many, and the slots take the others
meanwhile. The skew part runs the peers at P = S, 4S and 8S for S slots and pairs Ballast with the
best of them, not with the one a naive user would pick.

Why a process of its own: as for :mod:`bench.reduce.native`, a fresh ``local[cores]`` JVM per run.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle

from ballast.cli.connection import ConnectionSettings
from ballast.kafka.configuration import KafkaConfig
from bench.reduce.baseline import emit_and_store, load_key_state
from bench.reduce.native import (
    STORES,
    add_query_arguments,
    contender_spark,
    data_records,
    output_rows,
    run_until_signalled,
    store_conf,
)
from spark_jobs.processors.interface import KeyRecords
from spark_jobs.processors.spec import from_spec
from spark_jobs.record_cost import COST_KINDS, pay

APIS = ("tws", "apply")
WINDOWS = (  # what the processor returns per closed window; the JVM encodes it
    "key STRING, window_start LONG, window_end LONG, count LONG, "
    "sum DOUBLE, min DOUBLE, max DOUBLE, mean DOUBLE"
)


def keyed_rows(
    spark: Any, kafka: KafkaConfig, topic: str, max_offsets: int, watermark_delay: str, *, drop_wm: bool
) -> Any:
    """The data records as (key, offset, event_time ms, value), watermarked on their event time.

    ``drop_wm``: the timestamp column is dropped after (as the reduce job does; the processor sees
    every row and skips the late ones itself). ``applyInPandasWithState``'s event-time timeout
    refuses a plan whose watermark column was dropped, so it keeps it (one more column to Python).
    """
    from pyspark.sql import functions as F

    records = data_records(spark, kafka, topic, max_offsets, ("offset",))
    rows = records.select(
        "key",
        "offset",
        F.unix_millis("event_time").alias("event_time"),
        "value",
        F.col("event_time").alias("wm_time"),
    ).withWatermark("wm_time", watermark_delay)
    return rows.drop("wm_time") if drop_wm else rows


COLUMNS = ["key", "window_start", "window_end", "count", "sum", "min", "max", "mean"]


def fresh_records(pdfs: Iterator[pd.DataFrame], watermark: int) -> KeyRecords:
    """A key's rows of this batch in offset order, the late ones (before the watermark) left out,
    as the job's workers leave them out."""
    frames = list(pdfs)
    frame = frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)
    offsets = frame["offset"].to_numpy(dtype=np.int64)
    times = frame["event_time"].to_numpy(dtype=np.int64)
    values = frame["value"].to_numpy(dtype=np.float64)
    if offsets.size > 1 and (np.diff(offsets) < 0).any():  # a key's rows come in order, mostly
        order = np.argsort(offsets, kind="stable")
        times, values = times[order], values[order]
    fresh = times >= watermark
    return KeyRecords(times[fresh], values[fresh])


def window_frame(key: str, results: list) -> pd.DataFrame:
    return pd.DataFrame(
        [(key, r.window_start, r.window_end, r.count, r.sum, r.min, r.max, r.mean) for r in results],
        columns=COLUMNS,
    )


class PeerProcessor(StatefulProcessor):
    """``transformWithStateInPandas``, one key per group, written as a Spark expert would: one value
    state (the processor's state and the key's timer together, so no timer listing), one state read
    and one write per key and batch, a timer changed only when the next due window changes, and
    rows returned only when a window closes, as plain columns (the JVM encodes them with
    ``to_avro``, as the native query does; no Python Avro per key)."""

    def __init__(self, processor: str, record_cost_s: float, cost_kind: str) -> None:
        self.spec, self.cost, self.cost_kind = processor, record_cost_s, cost_kind

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.state = handle.getValueState("state", "blob BINARY, timer LONG")
        self.processor = from_spec(self.spec)

    def handleInputRows(self, key, rows, timerValues) -> Iterator[pd.DataFrame]:
        watermark = max(int(timerValues.getCurrentWatermarkInMs()), 0)
        records = fresh_records(rows, watermark)
        if self.cost:
            pay(len(records) * self.cost, self.cost_kind)
        state, timer = self._load()
        if len(records):
            state = self.processor.process(key[0], records, state)
        yield from self._finish(key[0], state, timer, watermark)

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo) -> Iterator[pd.DataFrame]:
        state, _timer = self._load()  # the timer fired: Spark removed it
        yield from self._finish(key[0], state, None, max(int(timerValues.getCurrentWatermarkInMs()), 0))

    def _load(self) -> tuple[Any, int | None]:
        return load_key_state(self.processor, self.state)

    def _finish(self, key: str, state: Any, timer: int | None, watermark: int) -> Iterator[pd.DataFrame]:
        results = emit_and_store(self.processor, self.handle, self.state, key, state, timer, watermark)
        if results:
            yield window_frame(key, results)

    def close(self) -> None:
        pass


def group_state_function(processor_spec: str, record_cost_s: float, cost_kind: str):
    """``applyInPandasWithState``'s function: the same step, its state travelling with the rows
    through Arrow (no state server round trips), an event-time timeout at the next due window."""
    processors: dict[str, Any] = {}

    def step(key, pdfs, state):
        processor = processors.get("p")
        if processor is None:
            processor = processors["p"] = from_spec(processor_spec)
        watermark = max(int(state.getCurrentWatermarkMs()), 0)
        current = processor.decode(bytes(state.get[0])) if state.exists else processor.init()
        if not state.hasTimedOut:
            records = fresh_records(pdfs, watermark)
            if record_cost_s:
                pay(len(records) * record_cost_s, cost_kind)
            if len(records):
                current = processor.process(key[0], records, current)
        results: list = []
        due = processor.next_due(current)
        if due is not None and due <= watermark:
            results, current = processor.emit(key[0], current, watermark)
            due = processor.next_due(current)
        if processor.is_empty(current):
            state.remove()
        else:
            state.update((bytes(processor.encode(current)),))
            if due is not None:
                state.setTimeoutTimestamp(int(due))
        if results:
            yield window_frame(key[0], results)

    return step


def start_query(spark: Any, kafka: KafkaConfig, args: argparse.Namespace) -> Any:
    """Start the per-key query; the ``StreamingQuery``."""
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

    tws = args.api == "tws"
    rows = keyed_rows(
        spark, kafka, args.topic, args.max_offsets_per_trigger, args.watermark_delay, drop_wm=tws
    )
    cost_s = args.record_cost_us / 1e6
    grouped = rows.groupBy("key")
    if tws:
        processor = PeerProcessor(args.processor, cost_s, args.record_cost_kind)
        windows = grouped.transformWithStateInPandas(
            statefulProcessor=processor, outputStructType=WINDOWS, outputMode="Update", timeMode="EventTime"
        )
    else:
        windows = grouped.applyInPandasWithState(
            group_state_function(args.processor, cost_s, args.record_cost_kind),
            outputStructType=WINDOWS,
            stateStructType="blob BINARY",
            outputMode="Update",
            timeoutConf=GroupStateTimeout.EventTimeTimeout,
        )
    aggregates = windows.select(
        F.struct(
            F.timestamp_millis("window_start").alias("start"), F.timestamp_millis("window_end").alias("end")
        ).alias("window"),
        "key",
        "count",
        "sum",
        "min",
        "max",
        "mean",
    )
    return (
        output_rows(aggregates, args.job)
        .writeStream.format("kafka")
        .queryName(args.job)
        .options(**kafka.spark_sink_options())
        .option("topic", args.output_topic)
        .option("checkpointLocation", args.checkpoint)
        .outputMode("update")
        .trigger(processingTime=args.trigger)
        .start()
    )


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench.reduce.peer", description=__doc__.splitlines()[0])
    add_query_arguments(ap, "shuffle (state) partitions: Spark's skew knob (S, 4S, 8S for S slots)")
    ap.add_argument("--processor", default="aggregate:size=10s", help="a spark_jobs.processors spec")
    ap.add_argument("--record-cost-us", type=float, default=0.0, help="simulated work per record, µs")
    ap.add_argument("--record-cost-kind", choices=COST_KINDS, default="cpu")
    ap.add_argument(
        "--api",
        choices=APIS,
        default="tws",
        help="tws: transformWithStateInPandas (RocksDB); apply: applyInPandasWithState (--store)",
    )
    ap.add_argument("--store", choices=STORES, default="rocksdb", help="the state store of --api apply")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the query until SIGTERM, then stop it between batches."""
    args = parse(argv)
    kafka = ConnectionSettings.from_args(args).checked_kafka_config("bench-reduce-peer")
    if args.api == "tws" and args.store != "rocksdb":
        print("peer: transformWithStateInPandas needs the RocksDB store", file=sys.stderr)
        return 2
    spark = contender_spark(args, store_conf(args.store))
    label = f"peer: query {args.job} (groupBy(key) {args.api}, {args.partitions} partitions, {args.store})"
    return run_until_signalled(spark, lambda: start_query(spark, kafka, args), label)


if __name__ == "__main__":
    sys.exit(main())
