"""Shared builders for the planner tests: small random instances with bytes keys."""

from __future__ import annotations

import numpy as np

from ballast.planner.stats import KeyStats
from ballast.routing.murmur2 import kafka_partition
from ballast.routing.table import RoutingTable


def make_stats(costs, mems=None, num_workers: int = 4, cold=None) -> KeyStats:
    """Stats over keys b"k0", b"k1", ... with Kafka homes; mem defaults to cost."""
    costs = np.asarray(costs, dtype=float)
    keys = [f"k{i}".encode() for i in range(costs.size)]
    mems = costs.copy() if mems is None else np.asarray(mems, dtype=float)
    return KeyStats.from_bytes_keys(keys, costs, mems, num_workers, cold_load=cold)


def routed_loads(stats: KeyStats, table: dict) -> np.ndarray:
    """Ground truth: route every key through a real RoutingTable (dict lookup + murmur2) and sum."""
    rt = RoutingTable(stats.num_workers, table)
    loads = stats.cold_load.astype(float).copy()
    for key, c in zip(stats.keys, stats.cost, strict=True):
        loads[rt.route(key)] += c
    return loads


def homes(stats: KeyStats) -> list[int]:
    return [kafka_partition(k, stats.num_workers) for k in stats.keys]
