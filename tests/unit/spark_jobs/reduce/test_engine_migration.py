"""The worker engine under live migration, without Spark: a small simulated cluster, no gentler
than Spark and the routers are.

Routers are simulated per input partition (each adopts a new epoch at its own pace, writing a
marker covering its partition into every worker's queue first, as the frontier rule demands, and
now and then a marker saying how far its partition has come in event time), and each partition's
events come with event-time skew of its own, and stragglers far behind their partition's
progress. Spark is simulated as micro-batches that read a random prefix of every worker's queue
(a lagging partition, an open transaction, ``maxOffsetsPerTrigger``); each worker keeps its own
watermark from the markers it has read (the slowest partition's progress minus the delay), so
stragglers arrive late. Chunks a step writes go to the end of the receiver's queue. Crashed
batches (a step whose outputs were written but whose state was not committed: a replay) and
duplicated chunks are injected; the hash modulus may change (``SCALE``).

Every row ever emitted is judged, not only the latest per window, against an independent
computation over the events (tests/support/reduce_reference.py): a (window, revision) is written
with one value only; each window's last revision equals the reference over the records that were
not dead-lettered; every record is either counted or dead-lettered; and each late record is
counted as excluded in its window's last row.
"""

from __future__ import annotations

import copy
import random
from collections import Counter, defaultdict
from typing import Any

import pandas as pd
import pytest

from ballast.control.state import make_event
from ballast.routing.murmur2 import kafka_partition
from spark_jobs.processors.aggregate import WindowAggregate
from spark_jobs.processors.batch import PerKeyAdapter, batch_processor
from spark_jobs.processors.last_values import LastValues
from spark_jobs.processors.windows import WindowSpec
from spark_jobs.reduce.contract import DATA, MARKER, WorkerConfig
from spark_jobs.reduce.engine import WorkerStep
from spark_jobs.reduce.ownership import OwnershipView
from spark_jobs.reduce.store import DictStore
from spark_jobs.reduce.worker_meta import WorkerMeta
from tests.support import reduce_reference
from tests.support.engine_rows import COLUMNS, PARTITIONS, chunk_row, control, genesis, row

W = 4  # routed partitions
HORIZON = 1_000


class Cluster:
    """W workers' queues, stores and metas, fed by simulated routers and drained by simulated batches."""

    def __init__(self, processor, rng: random.Random, crash_rate: float, dup_rate: float, chunk_bytes: int,
                 delay: int) -> None:  # fmt: skip
        self.processor = batch_processor(processor)
        self.rng = rng
        self.view = OwnershipView(W)
        self.view.apply(genesis(W))
        self.queues: list[list[dict[str, Any]]] = [[] for _ in range(W)]
        self.read = [0] * W
        self.stores = [DictStore() for _ in range(W)]
        self.metas: list[WorkerMeta | None] = [None] * W
        self.crash_rate = crash_rate
        self.dup_rate = dup_rate
        self.chunk_bytes = chunk_bytes
        self.delay = delay
        self.rows: list[tuple[str, int, int, Any]] = []  # every row emitted: key, window, revision, row
        self.dead: list[Any] = []  # dead letters of committed steps (their raw bytes name the event)
        self.installed = self.duplicates = self.held = self.replays = 0

    def append(self, worker: int, **kw: Any) -> None:
        q = self.queues[worker]
        q.append(row(offset=len(q), **kw))

    def control(self, etype: str, body: dict[str, Any]) -> int:
        epoch = self.view.epoch + 1
        self.view.apply(make_event(epoch, etype, body))
        return epoch

    def step_all(self, final: bool = False) -> None:
        for w in range(W):
            q = self.queues[w]
            end = len(q) if final else self.rng.randint(self.read[w], len(q))
            rows = q[self.read[w] : end]
            # every batch reads the control log's end as it is when the batch is planned (the
            # job's second source); a replay of the batch reads the same rows
            frame = pd.DataFrame([*rows, control(self.view.epoch)], columns=COLUMNS)
            if self.rng.random() < self.crash_rate:  # outputs written, state not committed: replayed
                self._step(w, frame, commit=False)
                self.replays += 1
            self._step(w, frame, commit=True)
            self.read[w] = end

    def _step(self, w: int, frame, commit: bool) -> None:
        store = self.stores[w] if commit else copy.deepcopy(self.stores[w])
        meta = copy.deepcopy(self.metas[w])
        config = WorkerConfig(
            w, PARTITIONS, workers=W, chunk_bytes=self.chunk_bytes, horizon_ms=HORIZON,
            watermark_delay_ms=self.delay,
        )  # fmt: skip
        result = WorkerStep(config, self.processor, self.view, store, meta).run(frame, 0)
        if commit:
            self.metas[w] = result.meta
            self.installed += len(result.stats["chunks_installed"])
            self.duplicates += result.stats["duplicate_chunks"]
            self.held += result.stats["held_records"]
            for d in result.dead:
                assert d.reason in ("late", "too-late"), d
            self.dead += result.dead
        r = result.results
        for i, res in enumerate(r.rows()):
            self.rows.append((res.key, res.window_start, int(r.revision[i]), (res, int(r.excluded[i]))))
        for c in result.chunks:
            for _ in range(2 if self.rng.random() < self.dup_rate else 1):
                q = self.queues[c.to_worker]
                q.append({**chunk_row(c), "offset": len(q)})


def simulate(processor, seed: int, crash_rate=0.2, dup_rate=0.3, chunk_bytes=1 << 20, scale=False, delay=120):
    rng = random.Random(seed)
    keys = [f"k{i}" for i in range(16)]
    weights = [1 / (i + 1) for i in range(len(keys))]
    part_of = {k: kafka_partition(k.encode(), len(PARTITIONS)) for k in keys}
    events = []
    for i, k in enumerate(rng.choices(keys, weights, k=1500)):
        skew = 60 * part_of[k]  # one input partition's clock runs behind the other's
        straggler = rng.randint(100, 400) if rng.random() < 0.03 else 0  # far behind its partition
        events.append(
            {
                "key": k,
                "value": rng.randint(0, 40) / 4,
                "event_time": i * 7 - skew + rng.randint(0, 30) - straggler,
                "id": i,
            }
        )
    cluster = Cluster(processor, rng, crash_rate, dup_rate, chunk_bytes, delay)
    queue = {p: [e for e in events if part_of[e["key"]] == p] for p in range(len(PARTITIONS))}
    cursor = dict.fromkeys(queue, 0)
    router_epoch = dict.fromkeys(queue, -1)
    progress = dict.fromkeys(queue, -1)  # the highest event time each router has routed

    def announce(p: int) -> None:
        for w in range(W):
            cluster.append(w, kind=MARKER, epoch=router_epoch[p], covers=[PARTITIONS[p]],
                           cover_times=[progress[p]], marker_worker=w)  # fmt: skip
    moves = 0
    scales = [3, 4] if scale else []
    hot = keys[0]
    while any(cursor[p] < len(queue[p]) for p in queue):
        if moves < 6 and sum(cursor.values()) >= len(events) * (moves + 1) / 7:  # six updates, spread
            latest = cluster.view.epoch
            if scales and moves in (1, 4):  # down to 3 hashed workers, later back up to 4
                cluster.control("SCALE", {"num_workers": scales.pop(0), "reason": ""})
            else:
                moved = [hot, *rng.sample(keys[1:], 3)]
                targets = range(min(3, W) if scale else W)  # pins stay on workers a SCALE to 3 keeps
                pins = {
                    k: rng.choice([w for w in targets if w != cluster.view.owner(k, latest)]) for k in moved
                }
                cluster.control("ROUTING_UPDATE", {"assign": pins, "unassign": [], "reason": ""})
            moves += 1
        for p in queue:
            if router_epoch[p] < cluster.view.epoch and rng.random() < 0.3:
                router_epoch[p] = cluster.view.epoch
                announce(p)
            if router_epoch[p] < 0 or rng.random() < 0.15:  # a router stalls now and then
                continue
            for _ in range(rng.randint(0, 6)):
                if cursor[p] >= len(queue[p]):
                    break
                e = queue[p][cursor[p]]
                cursor[p] += 1
                w = cluster.view.owner(e["key"], router_epoch[p])
                cluster.append(w, kind=DATA, key=e["key"], value=e["value"], event_time=e["event_time"],
                               epoch=router_epoch[p], raw=str(e["id"]).encode())  # fmt: skip
                progress[p] = max(progress[p], e["event_time"])
            if rng.random() < 0.5:  # a commit with a progress marker
                announce(p)
        if rng.random() < 0.1:
            cluster.step_all()
    for p in queue:  # every router ends on the last epoch, then a flush passes every window
        router_epoch[p] = cluster.view.epoch
        progress[p] += 100_000
        announce(p)
    for _ in range(8):  # drain: chunks written by one round are read by the next
        cluster.step_all(final=True)
    return events, cluster, moves


def check(events, cluster, expected_fn, *, rows_count_exclusions: bool = True) -> None:
    by_id = {e["id"]: e for e in events}
    dead = {int(d.raw): d.reason for d in cluster.dead}  # which events were left out, and why
    kept = [e for e in events if e["id"] not in dead]
    expected = expected_fn(kept)
    # every (key, window, revision) written with one value; every window's last revision is exact
    versions: dict[tuple[str, int], dict[int, Any]] = defaultdict(dict)
    for key, start, revision, value in cluster.rows:
        seen = versions[(key, start)].setdefault(revision, value)
        assert seen == value, f"{key} window {start} revision {revision} written with two values"
    final = {k: v[max(v)] for k, v in versions.items()}
    counted = {k: r for k, (r, _x) in final.items() if r.count}
    assert set(counted) == set(expected), set(counted) ^ set(expected)
    for k, exp in expected.items():
        r = counted[k]
        got = (r.count, r.sum, r.min, r.max, r.mean, r.window_end)
        assert got == (exp["count"], exp["sum"], exp["min"], exp["max"], exp["mean"], exp["window_end"]), k
        if "values" in exp:
            assert list(r.values) == list(exp["values"]), k
    if not rows_count_exclusions:  # a per-key processor's windows are its own: stats only
        return
    # each late record is counted as excluded in its windows' last rows (within the horizon)
    windows = cluster.processor.windows
    excluded: Counter[tuple[str, int]] = Counter()
    for i, reason in dead.items():
        if reason == "late":
            e = by_id[i]
            for start in reduce_reference.window_starts(e["event_time"], windows.size_ms, windows.step):
                excluded[(e["key"], start)] += 1
    for k, (_r, x) in final.items():
        assert x <= excluded[k], (k, x, excluded[k])  # never more than was left out
    counted_somewhere = {k for k, (_r, x) in final.items() if x}
    late_keys = {e for e, reason in dead.items() if reason == "late"}
    for i in late_keys:  # a late record is counted in at least one of its windows' last rows
        e = by_id[i]
        starts = reduce_reference.window_starts(e["event_time"], windows.size_ms, windows.step)
        assert any((e["key"], s) in counted_somewhere for s in starts), e


@pytest.mark.parametrize("seed", range(8))
def test_aggregate_exact_under_lag_migrations_crashes_and_duplicates(seed: int) -> None:
    events, cluster, moves = simulate(WindowAggregate(WindowSpec(100, 50)), seed)
    check(events, cluster, lambda kept: reduce_reference.expected_aggregates(kept, 100, 50))
    assert moves > 0 and cluster.installed > 0 and cluster.replays > 0


@pytest.mark.parametrize("seed", range(8))
def test_last_values_exact_under_lag_and_migrations(seed: int) -> None:
    events, cluster, moves = simulate(LastValues(3, WindowSpec(100)), seed, chunk_bytes=64)
    check(events, cluster, lambda kept: reduce_reference.expected_last_values(kept, 3, 100))
    assert moves > 0 and cluster.installed > 0


@pytest.mark.parametrize("seed", range(6))
def test_scale_down_and_up_during_the_run_is_exact(seed: int) -> None:
    events, cluster, _moves = simulate(WindowAggregate(WindowSpec(100)), seed, scale=True)
    check(events, cluster, lambda kept: reduce_reference.expected_aggregates(kept, 100))
    assert cluster.view.rehash_epochs, "no SCALE happened: nothing was tested"


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("mergeable", [True, False], ids=["mergeable", "not-mergeable"])
def test_a_per_key_processor_through_the_adapter_is_exact(seed: int, mergeable: bool) -> None:
    """The path a user's processor takes (PerKeyAdapter: encoded states in hash bins), under the
    same lag, migrations, crashes, duplicates and a SCALE; emission empties states while other
    keys of their bin stay open."""
    per_key = WindowAggregate(WindowSpec(100)) if mergeable else LastValues(3, WindowSpec(100))
    adapter = PerKeyAdapter(per_key, bins=3)
    events, cluster, moves = simulate(adapter, seed, chunk_bytes=256, scale=seed % 2 == 1)
    if mergeable:
        expected = lambda kept: reduce_reference.expected_aggregates(kept, 100)  # noqa: E731
    else:
        expected = lambda kept: reduce_reference.expected_last_values(kept, 3, 100)  # noqa: E731
    check(events, cluster, expected, rows_count_exclusions=False)
    assert moves > 0 and cluster.installed > 0


def test_stragglers_really_arrive_behind_the_watermark() -> None:
    """The simulation is no gentler than its routers: records far behind their own partition's
    progress arrive after the watermark passed them (and only those: see test_event_time.py)."""
    events, cluster, _moves = simulate(WindowAggregate(WindowSpec(100, 50)), 3)
    assert any(d.reason in ("late", "too-late") for d in cluster.dead)
    assert len(cluster.dead) < 0.05 * len(events)
