"""A long run of one worker (no Spark): 200 micro-batches, each with 5,000 keys never seen before
(user ids), a million keys in all. What a day of user or session ids would do to the state: it
must follow the open windows, not the keys ever seen, and so must the work of a step.

The work is counted, not timed: the buckets a step loads or rewrites and the rows they hold, and the
bytes of the metadata it stores. A step's CPU time on a shared machine says more about the machine
than the step; whether it stays flat is measured by ``make bench-reduce-soak`` (docs/reduce.md)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ballast.routing.murmur2 import kafka_partition_array, murmur2_array
from spark_jobs.processors.aggregate import WindowAggregate
from spark_jobs.processors.batch import batch_processor
from spark_jobs.processors.windows import WindowSpec
from spark_jobs.reduce import worker_meta
from spark_jobs.reduce.contract import DATA, WorkerConfig
from spark_jobs.reduce.engine import WorkerStep
from spark_jobs.reduce.ownership import OwnershipView
from spark_jobs.reduce.store import DictStore
from tests.support.engine_rows import COLUMNS, PARTITIONS, N, genesis, marker, with_watermark

STEPS = 200
KEYS_PER_STEP = 5_000
STEP_MS = 500  # event time a batch covers; windows of 1 s, watermark 1 s behind


def keys_homed_at_zero(start: int, count: int) -> tuple[np.ndarray, int]:
    """``count`` new user ids whose hash home is worker 0, and the next id to try."""
    found: list[str] = []
    while len(found) < count:
        candidates = [f"user-{i:09d}" for i in range(start, start + 4 * count)]
        homes = kafka_partition_array(murmur2_array([c.encode() for c in candidates]), N)
        found += [c for c, h in zip(candidates, homes.tolist(), strict=True) if h == 0]
        start += 4 * count
    return np.array(found[:count], dtype=object), start


def batch(keys: np.ndarray, step: int, offset: int, rng: np.random.Generator) -> pd.DataFrame:
    n = 2 * keys.size
    frame = pd.DataFrame({c: None for c in COLUMNS}, index=range(n))
    frame["kind"] = DATA
    frame["key"] = np.repeat(keys, 2)
    frame["value"] = 1.0
    frame["event_time"] = step * STEP_MS + rng.integers(0, STEP_MS, n)
    frame["epoch"] = 0
    frame["timestamp"] = 0
    frame["offset"] = offset + np.arange(n)
    return frame


def test_a_million_new_keys_leave_state_and_step_work_flat() -> None:
    view = OwnershipView(N)
    view.apply(genesis())
    processor = batch_processor(WindowAggregate(WindowSpec(1_000)))
    config = WorkerConfig(0, PARTITIONS, workers=N, horizon_ms=1_000)
    store = DictStore()
    first = pd.DataFrame([marker(0, 0)], columns=COLUMNS).assign(offset=0)
    meta = WorkerStep(config, processor, view, store, None).run(first, 0).meta
    rng = np.random.default_rng(7)
    next_id, offset = 0, 1
    kept_rows, kept_bytes, written, seen = [], [], [], 0
    buckets_touched, rows_touched, meta_bytes = [], [], []
    for step in range(STEPS):
        keys, next_id = keys_homed_at_zero(next_id, KEYS_PER_STEP)
        seen += keys.size
        frame = batch(keys, step, offset, rng)
        offset += len(frame)
        before = store.written
        meta = with_watermark(meta, max(0, step * STEP_MS - 1_000))
        result = WorkerStep(config, processor, view, store, meta).run(frame, 0)
        meta = result.meta
        kept_rows.append(result.stats["state_keys"])
        kept_bytes.append(result.stats["state_bytes"])
        written.append(store.written - before)
        buckets_touched.append(result.stats["buckets_touched"])
        rows_touched.append(result.stats["rows_touched"])
        meta_bytes.append(len(worker_meta.dump(meta)))
    assert seen >= 1_000_000
    # what is held: the windows the watermark has not closed (it is 1 s behind a batch; windows are
    # 1 s) and those closed within the 1 s correction horizon, 3 s of event time: 6 batches' keys
    assert max(kept_rows) <= (1_000 + 1_000 + 1_000) // STEP_MS * KEYS_PER_STEP, max(kept_rows)
    assert max(kept_rows[-20:]) <= 1.01 * max(kept_rows[20:40])
    assert max(kept_bytes[-20:]) <= 1.01 * max(kept_bytes[20:40])
    assert max(written[-20:]) <= 1.01 * max(written[20:40])  # what a step stores does not grow
    # what a step works on: a bucket is a window (1 s). A batch's records fall in one window, the
    # watermark closes at most one more and the horizon drops at most one: 3 buckets, and the rows
    # of 3 windows of 2 batches' keys, however many keys came before
    assert max(buckets_touched) <= 3, max(buckets_touched)
    assert max(rows_touched) <= 3 * (1_000 // STEP_MS) * KEYS_PER_STEP, max(rows_touched)
    assert max(buckets_touched[-20:]) <= max(buckets_touched[20:40])
    assert max(rows_touched[-20:]) <= max(rows_touched[20:40])
    # the metadata stored with every step follows the windows too (it grows by digits of offsets)
    assert max(meta_bytes[-20:]) <= 1.1 * max(meta_bytes[20:40]), (meta_bytes[20:40], meta_bytes[-20:])
