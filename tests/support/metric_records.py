"""Metrics records as the services publish them, built by hand for unit tests of what reads them."""

from __future__ import annotations

from ballast.metrics.records import RouterKeyStats


def router_stats(worker_records: list[int], heavy: dict[str, int], epoch: int = 3) -> RouterKeyStats:
    """A router's interval: records per worker (all kept) and its heavy hitters (exact counts)."""
    return RouterKeyStats.of({
        "epoch": epoch,
        "worker_records": worker_records,
        "worker_bytes": [0] * len(worker_records),
        "offered_records": sum(worker_records),
        "kept_records": sum(worker_records),
        "heavy_hitters": [{"key": k, "count": n, "error": 0} for k, n in heavy.items()],
        "sketch_capacity": 100,
    })  # fmt: skip
