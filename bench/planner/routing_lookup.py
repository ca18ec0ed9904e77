"""Micro-benchmark: routing cost per record = one dict lookup + (on a miss) one Kafka murmur2.

Run alone: ``.venv/bin/python bench/planner/routing_lookup.py`` (writes bench/results/routing_lookup.json).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from ballast.routing.murmur2 import kafka_partition
from ballast.routing.table import RoutingTable

RESULTS = Path(__file__).resolve().parents[1] / "results"


def _rate(fn, keys: list[bytes], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for k in keys:
            fn(k)
        best = min(best, time.perf_counter() - t0)
    return len(keys) / best


def run(num_keys: int = 100_000, table_size: int = 3000, workers: int = 20, repeat: int = 3) -> dict:
    rng = np.random.default_rng(0)
    keys = [str(k).encode() for k in range(num_keys)]
    pinned = rng.choice(num_keys, size=table_size, replace=False)
    table = RoutingTable(
        workers, {keys[i]: (kafka_partition(keys[i], workers) + 1) % workers for i in pinned}
    )
    # A Zipf(0.85) record stream over the keys; hot keys are the pinned ones, as after a plan.
    ranks = np.arange(1, num_keys + 1) ** -0.85
    order = np.concatenate([pinned, np.setdiff1d(np.arange(num_keys), pinned)])
    stream_idx = rng.choice(order, size=200_000, p=ranks / ranks.sum())
    stream = [keys[i] for i in stream_idx]
    hits = [keys[i] for i in pinned] * 20
    misses = [k for k in keys[:60_000] if k not in table]
    route = table.route
    res = {
        "table_entries": len(table),
        "workers": workers,
        "zipf_stream_lookups_per_s": _rate(route, stream, repeat),
        "zipf_stream_hit_ratio": float(np.mean([k in table for k in stream[:20_000]])),
        "table_hit_lookups_per_s": _rate(route, hits, repeat),
        "table_miss_lookups_per_s": _rate(route, misses, repeat),
        "bare_dict_get_per_s": _rate(table.entries.get, misses, repeat),
        "bare_murmur2_partition_per_s": _rate(lambda k: kafka_partition(k, workers), misses, repeat),
        "python": sys.version.split()[0],
    }
    return res


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    res = run(repeat=args.repeat)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "routing_lookup.json").write_text(json.dumps(res, indent=2) + "\n")
    for k, v in res.items():
        print(f"{k:32s} {v:,.0f}" if isinstance(v, float) and v > 100 else f"{k:32s} {v}")
    return res


if __name__ == "__main__":
    main()
