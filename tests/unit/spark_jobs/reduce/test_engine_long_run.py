"""A long run of one worker (no Spark): 200 micro-batches, each with 5,000 keys never seen before
(user ids), a million keys in all. What a day of user or session ids would do to the state: it
must follow the open windows, not the keys ever seen, and so must the cost of a step."""

from __future__ import annotations

import time

import numpy as np
import pandas as pd

from ballast.routing.murmur2 import kafka_partition_array, murmur2_array
from spark_jobs.processors.aggregate import WindowAggregate
from spark_jobs.processors.batch import batch_processor
from spark_jobs.processors.windows import WindowSpec
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


def test_a_million_new_keys_leave_state_and_step_cost_flat() -> None:
    view = OwnershipView(N)
    view.apply(genesis())
    processor = batch_processor(WindowAggregate(WindowSpec(1_000)))
    config = WorkerConfig(0, PARTITIONS, workers=N, horizon_ms=1_000)
    store = DictStore()
    first = pd.DataFrame([marker(0, 0)], columns=COLUMNS).assign(offset=0)
    meta = WorkerStep(config, processor, view, store, None).run(first, 0).meta
    rng = np.random.default_rng(7)
    next_id, offset = 0, 1
    cpu, kept_rows, kept_bytes, written, seen = [], [], [], [], 0
    for step in range(STEPS):
        keys, next_id = keys_homed_at_zero(next_id, KEYS_PER_STEP)
        seen += keys.size
        frame = batch(keys, step, offset, rng)
        offset += len(frame)
        before = store.written
        started = time.process_time()
        meta = with_watermark(meta, max(0, step * STEP_MS - 1_000))
        result = WorkerStep(config, processor, view, store, meta).run(frame, 0)
        cpu.append(time.process_time() - started)
        meta = result.meta
        kept_rows.append(result.stats["state_keys"])
        kept_bytes.append(result.stats["state_bytes"])
        written.append(store.written - before)
    assert seen >= 1_000_000
    # what is held: the windows the watermark has not closed (it is 1 s behind a batch; windows are
    # 1 s) and those closed within the 1 s correction horizon, 3 s of event time: 6 batches' keys
    assert max(kept_rows) <= (1_000 + 1_000 + 1_000) // STEP_MS * KEYS_PER_STEP, max(kept_rows)
    assert max(kept_rows[-20:]) <= 1.01 * max(kept_rows[20:40])
    assert max(kept_bytes[-20:]) <= 1.01 * max(kept_bytes[20:40])
    assert max(written[-20:]) <= 1.01 * max(written[20:40])  # what a step stores does not grow
    ratio = float(np.median(cpu[-20:]) / np.median(cpu[20:40]))
    assert ratio <= 1.2, (ratio, cpu[20:40], cpu[-20:])
