"""The controller's planning round on router load: pure, checked against loads recomputed key by key."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from ballast.routing.murmur2 import kafka_partition
from ballast.workload import key_name, zipf_key_ids
from services.controller.planning import plan_from_load, plan_table
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


def _router_load(counts: Counter[bytes], tracked: int) -> RouterLoad:
    """What routers would publish: exact per-worker counts, the ``tracked`` largest keys."""
    load = RouterLoad.empty(WORKERS)
    load.add(
        {
            "worker_records": _loads(counts, lambda k: kafka_partition(k, WORKERS)).astype(int).tolist(),
            "heavy_hitters": [
                {"key": k.decode(), "count": n, "error": 0} for k, n in counts.most_common(tracked)
            ],
            "kept_records": sum(counts.values()),
        }
    )
    return load


def test_router_load_sums_intervals_and_keys():
    load = RouterLoad.empty(3)
    hh = [{"key": "a", "count": 5, "error": 0}]
    load.add({"worker_records": [1, 2, 3], "heavy_hitters": hh, "kept_records": 6})
    hh = [{"key": "a", "count": 2, "error": 1}]
    load.add({"worker_records": [1, 0, 0], "heavy_hitters": hh, "kept_records": 1})
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
