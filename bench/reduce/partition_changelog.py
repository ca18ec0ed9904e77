"""The partition stage's changelog: record format, and a partition's state rebuilt from it.

One compacted topic, one partition per routed partition. Three kinds of record:

* an **entry**, key ``key \\x00 window_start``, value count, sum, min, max (:data:`ENTRY`): an
  open window's figures after a batch changed it;
* a **tombstone**, the same key and no value: the window closed (written and dropped);
* the **meta** record, key :data:`META_KEY`, value :data:`META`: the partition's last batch id, max
  event time, late records so far and in that batch. Written in every exactly-once transaction, so
  the committed changelog says which batch it holds, and a replayed batch is recognised as done
  even on a host that never saw it (:mod:`bench.reduce.partition_exactly_once`).

Why the meta rides in the changelog and not in a file: the changelog is the one copy that is
committed atomically with the windows; a local file is a cache of it that a crash can leave behind.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

from bench.reduce.partition_fold import INDEX, PartitionState, empty_table

ENTRY = struct.Struct("<qddd")  # count, sum, min, max
META = struct.Struct("<qqqq")  # batch id, max event ms, late total, late in the last batch
META_KEY = b"\x00meta"


def changelog_key(key: str, window_start: int) -> bytes:
    return f"{key}\x00{window_start}".encode()


def meta_value(state: PartitionState) -> bytes:
    return META.pack(state.batch_id, state.max_event_ms, state.late_total, state.last_late)


def apply_records(state: PartitionState, records: Iterable[tuple[bytes, bytes | None]]) -> PartitionState:
    """``state`` with changelog records (key, value) applied in offset order.

    Pure, so a rebuild is tested without a broker. The result's ``last_closed`` is empty: the
    exactly-once task never gives a replay's windows again (they were committed once).
    """
    t = state.table
    figures = zip(t.index, t["count"], t["sum"], t["min"], t["max"], strict=True)
    entries: dict[tuple[str, int], tuple[int, float, float, float]] = {
        (k, int(s)): (int(c), float(total), float(lo), float(hi)) for (k, s), c, total, lo, hi in figures
    }
    batch, max_ms, late_total, last_late = (
        state.batch_id,
        state.max_event_ms,
        state.late_total,
        state.last_late,
    )
    for key, value in records:
        if key == META_KEY:
            if value is None:
                raise ValueError("the changelog's meta record has no value")
            batch, max_ms, late_total, last_late = META.unpack(value)
            continue
        name, sep, start = key.decode().rpartition("\x00")
        if not sep:
            raise ValueError(f"changelog key {key!r} is neither an entry nor the meta record")
        if value is None:
            entries.pop((name, int(start)), None)
        else:
            entries[(name, int(start))] = ENTRY.unpack(value)
    return PartitionState(batch, table_of(entries), max_ms, late_total, empty_table(), last_late)


def table_of(entries: dict[tuple[str, int], tuple[int, float, float, float]]) -> pd.DataFrame:
    if not entries:
        return empty_table()
    index = pd.MultiIndex.from_tuples(list(entries), names=INDEX)
    counts, sums, mins, maxes = zip(*entries.values(), strict=True)
    return pd.DataFrame(
        {
            "count": np.array(counts, dtype=np.int64),
            "sum": np.array(sums, dtype=np.float64),
            "min": np.array(mins, dtype=np.float64),
            "max": np.array(maxes, dtype=np.float64),
        },
        index=index,
    )


def entry_records(changed: pd.DataFrame, removed: Any) -> Iterable[tuple[bytes, bytes | None]]:
    """A batch's changelog records: every changed entry, then a tombstone per removed window."""
    keys = changed.index.get_level_values(0)
    starts = changed.index.get_level_values(1)
    figures = zip(changed["count"].to_numpy(), changed["sum"].to_numpy(), changed["min"].to_numpy(),
                  changed["max"].to_numpy(), strict=True)  # fmt: skip
    for k, s, (c, total, lo, hi) in zip(keys, starts, figures, strict=True):
        yield changelog_key(k, int(s)), ENTRY.pack(int(c), total, lo, hi)
    for k, s in removed:
        yield changelog_key(k, int(s)), None


def produce_records(
    producer: Any, topic: str, partition: int, records: Iterable[tuple[bytes, bytes | None]], on_delivery: Any
) -> int:
    """Hand ``records`` to ``producer`` for the changelog's ``partition`` (serving delivery reports
    every 10,000 so its queue drains); how many. The caller's flush or commit waits for the acks."""
    n = 0
    for n, (key, value) in enumerate(records, 1):
        producer.produce(topic, value, key, partition=partition, on_delivery=on_delivery)
        if n % 10_000 == 0:
            producer.poll(0)
    return n
