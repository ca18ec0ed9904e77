"""The controller's planning round on router load: pure, checked against loads recomputed key by key."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from ballast.control.state import ControlState, initial_state
from ballast.metrics.records import RouterKeyStats
from ballast.routing.murmur2 import kafka_partition
from ballast.workload import key_name, zipf_key_ids
from services.controller.planning import plan_from_load, plan_table, planning_round
from services.controller.router_load import RouterLoad

pytestmark = pytest.mark.unit

WORKERS = 8


def _records(n: int = 200_000, keys: int = 5_000) -> Counter[bytes]:
    return Counter(key_name(int(i)).encode() for i in zipf_key_ids(n, keys, 1.1, seed=7))


def _loads(counts: Counter[bytes], route) -> np.ndarray:
    loads = np.zeros(WORKERS)
    for key, n in counts.items():
        loads[route(key)] += n
    return loads


def _stats(worker_records: list[int], heavy_hitters: list[dict], kept: int) -> RouterKeyStats:
    """One RouterKeyStats interval as the metrics reader types it."""
    return RouterKeyStats.of(
        {
            "epoch": 0,
            "worker_records": worker_records,
            "worker_bytes": [0] * len(worker_records),
            "offered_records": kept,
            "kept_records": kept,
            "heavy_hitters": heavy_hitters,
            "sketch_capacity": 10_000,
        }
    )


def _router_load(counts: Counter[bytes], tracked: int, route=None) -> RouterLoad:
    """What routers would publish: exact per-worker counts (routed by ``route``, else the hash),
    the ``tracked`` largest keys."""
    load = RouterLoad.empty(WORKERS)
    per_worker = _loads(counts, route or (lambda k: kafka_partition(k, WORKERS))).astype(int).tolist()
    hh = [{"key": k.decode(), "count": n, "error": 0} for k, n in counts.most_common(tracked)]
    load.add(_stats(per_worker, hh, sum(counts.values())))
    return load


def test_router_load_sums_intervals_and_keys():
    load = RouterLoad.empty(3)
    load.add(_stats([1, 2, 3], [{"key": "a", "count": 5, "error": 0}], 6))
    load.add(_stats([1, 0, 0], [{"key": "a", "count": 2, "error": 1}], 1))
    assert load.per_worker.tolist() == [2, 2, 3]
    assert load.heavy_hitters == Counter({b"a": 7}) and load.intervals == 2 and load.kept_records == 7


def test_plan_lowers_the_real_imbalance():
    counts = _records()
    hashed = _loads(counts, lambda k: kafka_partition(k, WORKERS))
    plan = plan_from_load(_router_load(counts, tracked=1_000), WORKERS, theta=0.08)
    table = plan_table(plan)
    planned = _loads(counts, table.route)
    assert planned.sum() == hashed.sum()
    assert planned.max() / planned.mean() < hashed.max() / hashed.mean()
    # the table only holds deviations from the hash, and only keys the routers reported
    assert all(w != kafka_partition(k, WORKERS) for k, w in table.items())
    assert set(table) <= {k for k, _ in counts.most_common(1_000)}


def test_untracked_keys_never_move():
    counts = _records()
    plan = plan_from_load(_router_load(counts, tracked=50), WORKERS, theta=0.08)
    assert len(plan_table(plan)) <= 50


def test_a_round_sends_only_what_changes():
    """Against an empty table the round assigns its whole table; planned again on the same load
    against that table it changes nothing; on a shifted load it assigns the new entries and hands
    the keys it no longer pins back to the hash (the diff the ROUTING_UPDATE carries)."""
    counts = _records()
    state = initial_state(WORKERS)
    first = planning_round(_router_load(counts, 1_000), state, 0.08)
    assert first.assign == first.table and not first.unassign and first.changes
    pinned = ControlState(num_workers=WORKERS, epoch=1, table=first.table)
    again = planning_round(_router_load(counts, 1_000, pinned.table.route), pinned, 0.08)
    assert not again.changes, (again.assign, again.unassign)
    ranked = sorted(counts.values(), reverse=True)
    shifted = Counter({key_name(3000 + i).encode(): n for i, n in enumerate(ranked)})  # a new hot set
    moved = planning_round(_router_load(shifted, 1_000, pinned.table.route), pinned, 0.08)
    assert moved.unassign and set(moved.unassign) <= set(first.table)
    assert all(first.table.get(k) != w for k, w in moved.assign.items())
    for key, (home, worker) in moved.moves(WORKERS).items():
        assert home == kafka_partition(key.encode(), WORKERS) and worker == moved.table[key] != home
