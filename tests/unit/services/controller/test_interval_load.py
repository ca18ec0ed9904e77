"""Folding one interval's router and worker statistics into per-key and per-worker load, by hand."""

from __future__ import annotations

import numpy as np
import pytest

from ballast.metrics.records import WorkerStats
from ballast.routing.murmur2 import kafka_partition
from ballast.routing.table import RoutingTable
from services.controller.interval_load import cost_per_record, fold_interval, key_state_bytes, router_weights
from tests.support.metric_records import router_stats as router

pytestmark = pytest.mark.unit


def worker(w: int, records: int, busy_ms: float, step: int = 0, state_bytes: int = 0, state_keys: int = 0,
           heavy_state: dict[str, int] | None = None) -> WorkerStats:
    return WorkerStats.of({
        "worker": w, "epoch": 3, "records": records, "busy_ms": busy_ms, "step": step,
        "state_bytes": state_bytes, "state_keys": state_keys,
        "heavy_state": [{"key": k, "bytes": b} for k, b in (heavy_state or {}).items()],
    })


def test_cost_per_record_sums_steps_and_pools_where_a_worker_processed_nothing():
    stats = [worker(0, 100, 200.0), worker(0, 100, 100.0), worker(1, 50, 25.0), worker(2, 0, 40.0)]
    # worker 0: 300 ms / 200 = 1.5; worker 1: 25 / 50 = 0.5; worker 2 and 3 processed nothing:
    # pooled (300 + 25 + 40) / 250 = 1.46
    assert cost_per_record(stats, 4).tolist() == pytest.approx([1.5, 0.5, 1.46, 1.46])
    assert cost_per_record([], 2).tolist() == [1.0, 1.0]
    assert cost_per_record([worker(7, 10, 10.0)], 2).tolist() == [1.0, 1.0]  # unknown worker ignored


def test_fold_prices_each_key_at_its_workers_cost_and_leaves_the_rest_as_remainder():
    table = {b"a": 0, b"b": 1, b"c": 1}
    routers = [router([600, 300], {"a": 400, "b": 100}), router([200, 100], {"a": 100, "c": 150})]
    workers = [worker(0, 800, 1600.0), worker(1, 400, 200.0)]  # 2.0 and 0.5 ms per record
    load = fold_interval(routers, workers, table.__getitem__, 2)
    got = dict(zip(load.keys, load.key_load.tolist(), strict=True))
    # a: 500 records on worker 0 at 2.0 = 1000; b: 100 on 1 at 0.5 = 50; c: 150 on 1 at 0.5 = 75
    assert got == {b"a": 1000.0, b"b": 50.0, b"c": 75.0}
    assert load.worker_records.tolist() == [800.0, 400.0]
    assert load.worker_load.tolist() == [1600.0, 200.0]
    # remainder: worker 0 1600 - 1000 = 600; worker 1 200 - 125 = 75
    assert load.remainder.tolist() == [600.0, 75.0]
    assert load.imbalance == pytest.approx(1600.0 / 900.0)


def test_records_alone_would_call_this_balanced_the_cost_does_not():
    routers = [router([500, 500], {})]
    workers = [worker(0, 500, 1500.0), worker(1, 500, 500.0)]  # worker 0 is 3x as slow per record
    load = fold_interval(routers, workers, lambda k: 0, 2)
    assert load.worker_records.tolist() == [500.0, 500.0]
    assert load.imbalance == pytest.approx(1500.0 / 1000.0)


def test_remainder_is_floored_when_sketch_counts_overshoot():
    routers = [router([100, 100], {"a": 130})]
    load = fold_interval(routers, [worker(0, 100, 100.0), worker(1, 100, 100.0)], lambda k: 0, 2)
    assert load.remainder.tolist() == [0.0, 100.0]


def test_fold_routes_through_the_routing_table_in_force():
    table = RoutingTable(4, {b"hot": 3}, 7)
    cold = "cold-key"
    routers = [router([10, 10, 10, 10], {"hot": 5, cold: 4})]
    load = fold_interval(routers, [], table.route, 4)
    where = dict(zip(load.keys, load.key_worker.tolist(), strict=True))
    assert where == {b"hot": 3, cold.encode(): kafka_partition(cold.encode(), 4)}


def test_idle_interval_and_bad_routes():
    load = fold_interval([router([0, 0], {})], [], lambda k: 0, 2)
    assert load.imbalance == 1.0 and load.keys == ()
    with pytest.raises(ValueError):
        fold_interval([router([1, 1], {"a": 1})], [], lambda k: 5, 2)


def test_router_lists_longer_or_shorter_than_the_workers():
    load = fold_interval([router([1, 2, 3], {}), router([4], {})], [], lambda k: 0, 2)
    assert load.worker_records.tolist() == [5.0, 2.0]


def test_key_state_bytes_latest_report_of_the_keys_worker_then_elsewhere_then_average():
    stats = [
        worker(0, 1, 1.0, step=4, state_bytes=900, state_keys=9, heavy_state={"a": 300, "m": 50}),
        worker(0, 1, 1.0, step=5, state_bytes=1000, state_keys=10, heavy_state={"a": 350}),
        worker(1, 1, 1.0, step=2, state_bytes=60, state_keys=3, heavy_state={"m": 80}),
    ]
    keys = [b"a", b"m", b"x", b"y"]
    where = np.array([0, 0, 0, 1])
    # a: worker 0's latest step (5) says 350; m: worker 0 reported 50 (step 4): its own worker wins
    # over worker 1's 80; x: never reported, worker 0's latest average 1000/10 = 100; y: 60/3 = 20
    assert key_state_bytes(stats, keys, where, 2).tolist() == [350.0, 50.0, 100.0, 20.0]
    # m on worker 1 (it moved): worker 1's own 80; a on worker 1 (not reported there yet): 350 from
    # worker 0, where its state still is
    assert key_state_bytes(stats, [b"m", b"a"], np.array([1, 1]), 2).tolist() == [80.0, 350.0]


def test_records_pricing_counts_records_whatever_the_steps_cost():
    """Busy time that does not follow the records (per-step work, a pause) prices nothing."""
    routers = [router([800, 400], {"a": 500})]
    workers = [worker(0, 800, 40.0), worker(1, 400, 130.0)]
    measured = fold_interval(routers, workers, lambda k: 0, 2)
    assert measured.imbalance == pytest.approx(130.0 / 85.0)  # the slow-looking worker 1 is the max
    load = fold_interval(routers, workers, lambda k: 0, 2, "records")
    assert load.worker_load.tolist() == [800.0, 400.0] and load.key_load.tolist() == [500.0]
    assert load.imbalance == pytest.approx(800.0 / 600.0)
    assert load.remainder.tolist() == [300.0, 400.0]
    with pytest.raises(ValueError):
        fold_interval(routers, workers, lambda k: 0, 2, "bytes")


def test_each_router_counts_per_interval_whatever_the_number_of_its_reports():
    """Two routers at the same rate, 100 records/s each (r1 to worker 0, r2 to worker 1), reporting
    every 2 s; a 3 s interval holds two reports of r1 and one of r2. Unweighted, worker 0 and r1's
    key look twice as heavy; weighted, each router counts its records per 3 s."""
    reports = [router([200, 0], {"a": 120}), router([200, 0], {"a": 120}), router([0, 200], {"b": 120})]
    spans = [("router/r1", 2000), ("router/r1", 2000), ("router/r2", 2000)]
    weights = router_weights(spans, 3000)
    assert weights == [0.75, 0.75, 1.5]
    route = {b"a": 0, b"b": 1}.__getitem__
    unweighted = fold_interval(reports, [], route, 2, "records")
    assert unweighted.worker_records.tolist() == [400.0, 200.0]
    assert unweighted.imbalance == pytest.approx(4 / 3)
    load = fold_interval(reports, [], route, 2, "records", weights)
    assert load.worker_records.tolist() == [300.0, 300.0] and load.imbalance == 1.0
    assert dict(zip(load.keys, load.key_records.tolist(), strict=True)) == {b"a": 180.0, b"b": 180.0}
    assert router_weights([("r1", 1500), ("r2", 0)], 3000) == [2.0, 1.0]  # no span known: as reported
