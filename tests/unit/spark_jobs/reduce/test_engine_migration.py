"""The worker engine under live migration, without Spark: a small simulated cluster.

Routers are simulated per input partition (each switches to a new epoch at its own pace, writing
a marker covering its partition into every worker's queue first, as the frontier rule demands);
Spark is simulated as micro-batches that cut every worker's queue at random points and send the
chunks a step writes to the end of the receiver's queue. Crashed batches (a step whose outputs
were written but whose state was not committed) and duplicated chunks are injected. The final
results, latest per (key, window), must equal a direct computation over the events
(tests/support/reduce_reference.py), and no (key, window) may ever be emitted with two values.
"""

from __future__ import annotations

import copy
import random
from collections import defaultdict
from typing import Any

import pandas as pd
import pytest

from ballast.control.state import make_event
from ballast.routing.murmur2 import kafka_partition
from spark_jobs.processors.aggregate import WindowAggregate
from spark_jobs.processors.last_values import LastValues
from spark_jobs.processors.windows import WindowSpec
from spark_jobs.reduce.engine import CHUNK, DATA, MARKER, DictBinStore, WorkerConfig, WorkerStep
from spark_jobs.reduce.ownership import OwnershipView
from tests.support import reduce_reference

N = 4
PARTITIONS = ("in:0", "in:1")
COLUMNS = [
    "offset",
    "timestamp",
    "kind",
    "key",
    "value",
    "event_time",
    "epoch",
    "covers",
    "marker_worker",
    "chunk_from",
    "chunk_to",
    "chunk_index",
    "chunk_count",
    "chunk_state",
    "chunk_job",
    "raw",
    "error",
]


def row(**kw: Any) -> dict[str, Any]:
    base = dict.fromkeys(COLUMNS)
    base.update(timestamp=0, value=0.0, event_time=0, raw=b"", chunk_job="")
    base.update(kw)
    return base


def chunk_row(c, job: str = "") -> dict[str, Any]:
    """The row a state chunk (a step's ``ChunkOut``) becomes when its receiver reads it."""
    return row(
        kind=CHUNK,
        key=c.key,
        epoch=c.epoch,
        chunk_from=c.from_worker,
        chunk_to=c.to_worker,
        chunk_index=c.chunk_index,
        chunk_count=c.chunk_count,
        chunk_state=c.state,
        chunk_job=job,
    )


def genesis() -> dict[str, Any]:
    return make_event(
        0, "TABLE_SNAPSHOT", {"num_workers": N, "table": {}, "keep_probability": {}, "routed_partitions": N}
    )


class Cluster:
    """N workers' queues, stores and metas, fed by simulated routers and drained by simulated batches."""

    def __init__(
        self,
        processor,
        rng: random.Random,
        crash_rate: float = 0.0,
        dup_rate: float = 0.0,
        chunk_bytes: int = 1 << 20,
    ) -> None:
        self.processor = processor
        self.rng = rng
        self.view = OwnershipView(N)
        self.view.apply(genesis())
        self.events_log = [genesis()]
        self.queues: list[list[dict[str, Any]]] = [[] for _ in range(N)]
        self.read = [0] * N
        self.stores = [DictBinStore() for _ in range(N)]
        self.metas: list[dict | None] = [None] * N
        self.crash_rate = crash_rate
        self.dup_rate = dup_rate
        self.chunk_bytes = chunk_bytes
        self.emitted: dict[tuple[str, int], list[Any]] = defaultdict(list)
        self.installed = 0
        self.duplicates = 0
        self.held = 0
        self.max_time = -1

    def append(self, worker: int, **kw: Any) -> None:
        q = self.queues[worker]
        q.append(row(offset=len(q), **kw))

    def control(self, pins: dict[str, int]) -> int:
        epoch = self.view.epoch + 1
        event = make_event(epoch, "ROUTING_UPDATE", {"assign": pins, "unassign": [], "reason": ""})
        self.view.apply(event)
        return epoch

    def owner(self, key: str, epoch: int) -> int:
        return self.view.owner(key, epoch)

    def unread_min_time(self) -> int:
        times = [
            r["event_time"] for w in range(N) for r in self.queues[w][self.read[w] :] if r["kind"] == DATA
        ]
        return min(times) if times else 1 << 60

    def step_all(self, watermark: int, final: bool = False) -> None:
        # like Spark's, the watermark never passes a record still to be read (nothing is late here)
        watermark = min(watermark, self.unread_min_time())
        for w in range(N):
            q = self.queues[w]
            end = len(q) if final else self.rng.randint(self.read[w], len(q))
            rows = q[self.read[w] : end]
            frame = pd.DataFrame(rows, columns=COLUMNS) if rows else None
            if self.rng.random() < self.crash_rate:  # outputs written, state not committed: replay
                self._step(w, frame, watermark, commit=False)
            self._step(w, frame, watermark, commit=True)
            self.read[w] = end

    def _step(self, w: int, frame, watermark: int, commit: bool) -> None:
        store = self.stores[w] if commit else copy.deepcopy(self.stores[w])
        meta = copy.deepcopy(self.metas[w])
        config = WorkerConfig(w, PARTITIONS, bins=4, chunk_bytes=self.chunk_bytes)
        result = WorkerStep(config, self.processor, self.view, store, meta).run(frame, watermark, 0)
        if commit:
            self.metas[w] = result.meta
            self.installed += len(result.stats["chunks_installed"])
            self.duplicates += result.stats["duplicate_chunks"]
            self.held += result.stats["held_records"]
        assert not result.dead, result.dead
        for r in result.results:
            self.emitted[(r.key, r.window_start)].append(r)
        for c in result.chunks:
            copies = 2 if self.rng.random() < self.dup_rate else 1
            for _ in range(copies):
                q = self.queues[c.to_worker]
                q.append({**chunk_row(c), "offset": len(q)})


def simulate(
    processor, seed: int, crash_rate: float = 0.2, dup_rate: float = 0.3, chunk_bytes: int = 1 << 20
):
    rng = random.Random(seed)
    keys = [f"k{i}" for i in range(12)]
    weights = [1 / (i + 1) for i in range(len(keys))]
    part_of = {k: kafka_partition(k.encode(), len(PARTITIONS)) for k in keys}
    events = [
        {"key": k, "value": rng.randint(0, 40) / 4, "event_time": i * 7}
        for i, k in enumerate(rng.choices(keys, weights, k=1500))
    ]
    cluster = Cluster(processor, rng, crash_rate, dup_rate, chunk_bytes)
    # per input partition: its events in order, and the epoch its router currently routes under
    pending = {p: [e for e in events if part_of[e["key"]] == p] for p in range(len(PARTITIONS))}
    cursor = dict.fromkeys(pending, 0)
    router_epoch = dict.fromkeys(pending, -1)
    moves_done = 0
    hot = keys[0]
    while any(cursor[p] < len(pending[p]) for p in pending):
        # the controller: a routing update now and then (the hottest key moves several times)
        if moves_done < 6 and rng.random() < 0.02:
            moved = [hot, *rng.sample(keys[1:], 3)]
            pins = {
                k: rng.choice([w for w in range(N) if w != cluster.owner(k, cluster.view.epoch)])
                for k in moved
            }
            cluster.control(pins)
            moves_done += 1
        # each router, at its own pace, adopts the latest epoch (markers first), then routes a few
        for p in pending:
            if router_epoch[p] < cluster.view.epoch and rng.random() < 0.3:
                router_epoch[p] = cluster.view.epoch
                for w in range(N):
                    cluster.append(
                        w, kind=MARKER, epoch=router_epoch[p], covers=[PARTITIONS[p]], marker_worker=w
                    )
            if router_epoch[p] < 0:
                continue
            for _ in range(rng.randint(0, 6)):
                if cursor[p] >= len(pending[p]):
                    break
                e = pending[p][cursor[p]]
                cursor[p] += 1
                w = cluster.owner(e["key"], router_epoch[p])
                cluster.append(
                    w,
                    kind=DATA,
                    key=e["key"],
                    value=e["value"],
                    event_time=e["event_time"],
                    epoch=router_epoch[p],
                )
                cluster.max_time = max(cluster.max_time, e["event_time"])
        if rng.random() < 0.1:
            # a conservative watermark: no partition is behind it, so nothing is late
            behind = min(
                (pending[p][cursor[p]]["event_time"] if cursor[p] < len(pending[p]) else cluster.max_time)
                for p in pending
            )
            cluster.step_all(watermark=max(behind - 50, 0))
    for p in pending:  # every router ends on the last epoch
        if router_epoch[p] < cluster.view.epoch:
            router_epoch[p] = cluster.view.epoch
            for w in range(N):
                cluster.append(w, kind=MARKER, epoch=router_epoch[p], covers=[PARTITIONS[p]], marker_worker=w)
    for _ in range(6):  # drain: chunks written by one round are read by the next
        cluster.step_all(watermark=cluster.max_time + 10_000, final=True)
    return events, cluster, moves_done


def check(events, cluster, expected) -> None:
    for (key, start), versions in cluster.emitted.items():
        assert all(v == versions[0] for v in versions), f"{key} window {start} emitted with different values"
    got = {k: v[-1] for k, v in cluster.emitted.items()}
    assert set(got) == set(expected)
    for k, exp in expected.items():
        r = got[k]
        assert (r.count, r.sum, r.min, r.max, r.mean, r.window_end) == (
            exp["count"],
            exp["sum"],
            exp["min"],
            exp["max"],
            exp["mean"],
            exp["window_end"],
        ), k
        if "values" in exp:
            assert list(r.values) == list(exp["values"]), k


@pytest.mark.parametrize("seed", range(8))
def test_aggregate_exact_under_random_migrations_crashes_and_duplicates(seed: int) -> None:
    windows = WindowSpec(100, 50)
    events, cluster, moves = simulate(WindowAggregate(windows), seed)
    expected = reduce_reference.expected_aggregates(events, 100, 50)
    check(events, cluster, expected)
    assert moves > 0 and cluster.installed > 0


@pytest.mark.parametrize("seed", range(8))
def test_last_values_exact_under_random_migrations(seed: int) -> None:
    events, cluster, moves = simulate(LastValues(3, WindowSpec(100)), seed, chunk_bytes=64)
    expected = reduce_reference.expected_last_values(events, 3, 100)
    check(events, cluster, expected)
    assert moves > 0 and cluster.installed > 0
