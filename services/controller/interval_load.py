"""One interval's load, per key and per worker, from the routers' and the workers' statistics.

Why records are not load: a worker that spends 3 ms on a record is three times as loaded by a key
as one that spends 1 ms on it (heavier state, a slower host, a neighbour on the same core). So a
key's load is its records times its worker's *cost per record*, the worker's useful time divided by
the records it processed (DS2's true rate, inverted): ``busy_ms / records`` over the worker's steps
of the interval. Loads are in busy milliseconds per interval.

Why one interval only: the trigger judges the routing in force by what it produced, and the
forecast needs the interval-by-interval series; sums over several intervals would blur both.

What is folded:

* the routers' :class:`~ballast.metrics.records.RouterKeyStats` of the interval, summed over
  routers: records per worker (exact) and the heavy hitters (sketch counts, upper estimates);
* the workers' :class:`~ballast.metrics.records.WorkerStats` of the interval, summed per worker:
  records and ``busy_ms``, hence the cost per record;
* the routing in force (``route``), which says on which worker each heavy hitter's records landed.

A worker's load is its routed records times its cost per record. The tracked keys' loads are a
breakdown of it; what they leave is the *remainder*, the keys outside the heavy hitters, which
follow the hash and cannot be moved (floored at zero: sketch counts may overshoot).

A worker with no processed records in the interval has no cost per record of its own; it takes
the pooled cost of all workers (its routed records are real load, and the pool is the best guess of
what they cost), and 1.0 when no worker processed anything (loads then count records).

Why a second pricing, ``records`` (every record costs 1.0: loads count records): the measured cost
is only as good as ``busy_ms`` is proportional to records. When a step's time is mostly per-step
work (loading and writing state, emitting, a chunk installed, a pause of the host), as with a cheap
processor and micro-batches of a few hundred records per worker, busy time does not follow the
records at all. Measured on the reduce e2e deployment (2 shared cores, 2,000 records/s, 8
workers): in one 5 s interval the worker given 2,544 records was busy 47 ms, one given 1,218 was busy
134 ms, and a single step installing a chunk took 583 ms, so the "imbalance" the loop saw ranged
from 1.5 to 5 while the records were within 1.3. Balancing that is chasing noise; counting records
is then the measure of load that a plan can actually change.

:func:`key_state_bytes` folds the same interval's ``heavy_state`` into per-key state sizes, which is
what a migration of the key moves (pacing's byte budget) and what planning calls its memory.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from ballast.metrics.records import RouterKeyStats, WorkerStats


@dataclass(frozen=True, eq=False)
class IntervalLoad:
    """One interval's load. Per tracked key: records, worker, load; per worker: records, cost
    per record, load and the untracked remainder. Loads are busy ms per interval."""

    keys: tuple[bytes, ...]
    key_records: np.ndarray
    key_worker: np.ndarray
    key_load: np.ndarray
    worker_records: np.ndarray
    cost_per_record: np.ndarray
    worker_load: np.ndarray
    remainder: np.ndarray

    @property
    def num_workers(self) -> int:
        return len(self.worker_load)

    @property
    def imbalance(self) -> float:
        """Realized ``max/mean`` of the worker loads (1.0 for an idle interval)."""
        mean = float(self.worker_load.mean()) if self.num_workers else 0.0
        return float(self.worker_load.max()) / mean if mean > 0 else 1.0


def cost_per_record(worker_stats: Iterable[WorkerStats], workers: int) -> np.ndarray:
    """Busy ms per processed record of each worker over the interval's steps (pooled where unknown)."""
    busy = np.zeros(workers)
    records = np.zeros(workers)
    for ws in worker_stats:
        if 0 <= ws.worker < workers:
            busy[ws.worker] += float(ws.busy_ms)
            records[ws.worker] += float(ws.records)
    pooled = float(busy.sum() / records.sum()) if records.sum() > 0 else 1.0
    with np.errstate(divide="ignore", invalid="ignore"):
        own = busy / records
    return np.where(records > 0, own, pooled)


def router_weights(spans: Sequence[tuple[str, int]], interval_ms: float) -> list[float]:
    """Per router report, given as (router, the report's span in ms): ``interval_ms`` over the
    total span of that router's reports in the interval.

    Why: the routers publish on their own clocks (``--stats-interval-s``), so one controller
    interval holds a whole number of reports per router, not the same share of each router's
    time. With reports every 2 s and a 3 s interval, one router counts twice while another counts
    once, and the keys of the first look twice as heavy (in tests/e2e/test_controller.py a plan
    made on such a view moved 142 keys for a predicted max/mean of 1.43, where the same
    deployment's plans otherwise moved 7 keys for 1.07). Weighted, every router contributes its
    records per ``interval_ms``, whatever the number of its reports."""
    total: dict[str, int] = {}
    for source, span in spans:
        total[source] = total.get(source, 0) + max(0, int(span))
    return [interval_ms / total[source] if total[source] > 0 else 1.0 for source, _ in spans]


def routed(
    router_stats: Iterable[RouterKeyStats], workers: int, weights: Sequence[float] | None = None
) -> tuple[np.ndarray, Counter[bytes]]:
    """Records routed to each worker, and the heavy hitters' counts, summed over the routers'
    reports, each report's counts times its weight (:func:`router_weights`; None: 1 each)."""
    per_worker = np.zeros(workers)
    heavy: Counter[bytes] = Counter()
    for i, rs in enumerate(router_stats):
        weight = 1.0 if weights is None else float(weights[i])
        counts = np.asarray(rs.worker_records[:workers], dtype=np.float64)
        per_worker[: len(counts)] += counts * weight
        for hh in rs.heavy_hitters:
            heavy[hh.key.encode("utf-8")] += int(hh.count) * weight
    return per_worker, heavy


PRICINGS = ("measured", "records")


def fold_interval(
    router_stats: Iterable[RouterKeyStats],
    worker_stats: Iterable[WorkerStats],
    route: Callable[[bytes], int],
    workers: int,
    pricing: str = "measured",
    weights: Sequence[float] | None = None,
) -> IntervalLoad:
    """The load of one interval: ``route`` is the routing in force (e.g. ``RoutingTable.route``);
    ``pricing``: records at each worker's measured cost, or ``"records"``, every record at 1.0;
    ``weights``: one per router report (:func:`router_weights`)."""
    if pricing not in PRICINGS:
        raise ValueError(f"pricing must be one of {PRICINGS}, got {pricing!r}")
    per_worker, heavy = routed(router_stats, workers, weights)
    cost = cost_per_record(worker_stats if pricing == "measured" else (), workers)
    keys = tuple(heavy)
    key_records = np.array([heavy[k] for k in keys], dtype=np.float64)
    key_worker = np.array([route(k) for k in keys], dtype=np.int64)
    if key_worker.size and (key_worker.min() < 0 or key_worker.max() >= workers):
        raise ValueError(f"route sent a key outside workers 0..{workers - 1}")
    key_load = key_records * cost[key_worker] if keys else np.zeros(0)
    worker_load = per_worker * cost
    tracked = np.bincount(key_worker, weights=key_load, minlength=workers) if keys else np.zeros(workers)
    remainder = np.maximum(worker_load - tracked, 0.0)
    return IntervalLoad(keys, key_records, key_worker, key_load, per_worker, cost, worker_load, remainder)


def key_state_bytes(
    worker_stats: Sequence[WorkerStats], keys: Sequence[bytes], key_worker: np.ndarray, workers: int
) -> np.ndarray:
    """State bytes of each key: the latest ``heavy_state`` report of the key's worker in the
    interval; else the largest report of another worker (the state may not have moved yet); else
    the average key state of its worker (``state_bytes / state_keys`` at the worker's latest step).

    Why the latest: state is a level, not a flow, so a later step supersedes an earlier one (step
    counters are per worker, so "later" is only compared within one worker). Keys never reported
    are below the heaviest-states list, so the worker's average is an upper-ish estimate for them.
    """
    reported: dict[tuple[int, bytes], tuple[int, int]] = {}
    latest: dict[int, WorkerStats] = {}
    for ws in worker_stats:
        if not 0 <= ws.worker < workers:
            continue
        if ws.worker not in latest or ws.step >= latest[ws.worker].step:
            latest[ws.worker] = ws
        for ks in ws.heavy_state:
            at = (ws.worker, ks.key.encode("utf-8"))
            if at not in reported or ws.step >= reported[at][0]:
                reported[at] = (ws.step, int(ks.bytes))
    elsewhere: dict[bytes, int] = {}
    for (_, key), (_, size) in reported.items():
        elsewhere[key] = max(size, elsewhere.get(key, 0))
    average = np.zeros(workers)
    for w, ws in latest.items():
        average[w] = ws.state_bytes / ws.state_keys if ws.state_keys > 0 else 0.0
    out = np.empty(len(keys))
    for i, key in enumerate(keys):
        w = int(key_worker[i])
        own = reported.get((w, key))
        out[i] = own[1] if own is not None else elsewhere.get(key, average[w])
    return out
