"""The paper's three-phase workflow and LLFD (Least-Load Fit Decreasing) with Adjust.

Phase I (cleaning) is the caller's job: it hands in a working assignment where some table keys
are already moved back to ``h(k)``. This module runs Phase II (disassociate keys of overloaded
workers in criterion order R until each is under the cap) and Phase III (LLFD).

Decisions where the paper is silent (each one is tested in tests/unit/planner):

* **Adjust's exchangeable set E** is the greedy prefix, in R order, of the keys still resident on
  the target worker with ``0 < c_e < c_k``; the first prefix that brings the worker under the cap
  wins. Zero-cost keys are never evicted (moving them relieves nothing and would only migrate).
* **Keys placed earlier in the same run are not evictable.** This costs nothing: the heap pops
  costs in non-increasing order and evictees are strictly lighter than the key being placed, so a
  placed key can never satisfy ``c_e < c_k`` later anyway. It is what makes LLFD terminate: every
  eviction removes one of the original residents for good, so there are at most ``n`` evictions.
* **Worker order** for a key is ascending load, ties broken by preferring ``F(k)`` (no migration),
  then ``h(k)`` (no table entry), then the lower worker id (determinism).
* **No worker accepts the key** (every Adjust fails): place it on the least-loaded worker (same
  tie rule) and record it in ``unplaced``; the plan is then reported infeasible, never an error.
* **A key heavier than the cap by itself** cannot fit anywhere. It is *isolated*: placed on the
  worker with the least unmovable load (cold + already placed; ties prefer ``F(k)``, so the hot
  key usually stays and its light neighbours move, which is cheaper); lighter residents of that
  worker are evicted in R order until it carries at most ``c_k + theta_max * mean`` (plus any
  unmovable load), skipping crumbs lighter than ``ISOLATE_CRUMB * mean``. Evicting every crumb
  would cut the overload a little further but cost one table entry each (thousands at K = 1e6);
  the crumb rule bounds an isolation to about 1000 evictions.
* **Balance test** uses an absolute tolerance of ``1e-9 * total load`` so float noise in sums of
  10**6 costs does not flip a worker between balanced and overloaded.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

import numpy as np

_FIRST_CHUNK = 64
# Isolating an over-cap key does not evict residents lighter than this fraction of the mean load:
# each eviction costs a table entry, and a crumb relieves almost nothing. It also bounds one
# isolation to at most (1 + theta_max) / ISOLATE_CRUMB evictions.
ISOLATE_CRUMB = 1e-3


@dataclass
class PhaseResult:
    """Outcome of Phases II+III on one working assignment."""

    assign: np.ndarray
    loads: np.ndarray
    candidates: int = 0
    evictions: int = 0
    unplaced: list[int] = field(default_factory=list)

    def table_size(self, home: np.ndarray) -> int:
        return int(np.count_nonzero(self.assign != home))


def migration_priority(cost: np.ndarray, mem: np.ndarray, beta: float) -> np.ndarray:
    """The paper's migration priority index ``gamma_k = c_k**beta / M_k``.

    A key with no state (``M_k = 0``) is free to move, so it gets +inf priority unless it also has
    no cost (then 0: moving it relieves nothing).
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        gamma = np.power(cost, beta) / mem
    gamma[cost == 0] = 0.0
    gamma[np.isnan(gamma)] = 0.0
    return gamma


def r_order(priority: np.ndarray) -> np.ndarray:
    """Key indices in criterion order R: descending priority, ties by key index (deterministic)."""
    return np.argsort(-priority, kind="stable")


def rebalance(
    cost: np.ndarray,
    home: np.ndarray,
    physical: np.ndarray,
    working: np.ndarray,
    order: np.ndarray,
    cold_load: np.ndarray,
    cap: float,
    tol: float,
    trace: list[tuple[float, np.ndarray]] | None = None,
) -> PhaseResult:
    """Phases II and III from the (possibly cleaned) ``working`` assignment.

    ``physical`` is ``F`` before planning (used only for tie-breaking towards "no move");
    ``order`` is criterion R as a permutation of key indices (used by both phases, as the paper's
    MinMig/Mixed do; MinTable passes cost order). ``trace``, if given, receives
    ``(c_k, costs of the keys evicted to place k)`` for every eviction (tests check Adjust's rule).
    """
    n_workers = cold_load.shape[0]
    n = cost.shape[0]
    assign = working.astype(np.int32, copy=True)
    loads = np.bincount(assign, weights=cost, minlength=n_workers) + cold_load
    limit = cap + tol
    mean = (float(cost.sum()) + float(cold_load.sum())) / max(n_workers, 1)
    slack = max(cap - mean, 0.0)
    crumb = ISOLATE_CRUMB * mean

    # Group keys by worker, each group in R order: one stable radix sort instead of per-worker scans.
    owner_in_order = assign[order]
    if n_workers < np.iinfo(np.int16).max:
        owner_in_order = owner_in_order.astype(np.int16)  # numpy's stable sort is a radix sort here
    perm = np.argsort(owner_in_order, kind="stable")
    grouped = order[perm]
    bounds = np.searchsorted(owner_in_order[perm], np.arange(n_workers + 1))
    # Evictable mass per worker (residents only); a cheap upper bound to reject Adjust early.
    resident = loads - cold_load

    # ---- Phase II: disassociate in R order until each overloaded worker is under the cap.
    candidates: list[np.ndarray] = []
    for d in np.flatnonzero(loads > limit):
        seq = grouped[bounds[d] : bounds[d + 1]]
        if seq.size == 0:
            continue  # only cold (immovable) load here; nothing to disassociate
        csum = np.cumsum(cost[seq])
        excess = loads[d] - cap
        j = int(np.searchsorted(csum, excess - tol, side="left"))
        take = seq[: min(j + 1, seq.size)]
        removed = float(csum[take.size - 1])
        assign[take] = -1
        loads[d] -= removed
        resident[d] -= removed
        candidates.append(take)
    if not candidates:
        return PhaseResult(assign, loads)
    cand = np.concatenate(candidates)

    # ---- Phase III: LLFD. Max-heap by cost; ties by position in R (rank) for determinism.
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n)
    heap = [(-float(cost[k]), int(rank[k]), int(k)) for k in cand]
    heapq.heapify(heap)
    worker_ids = np.arange(n_workers)
    evictions = 0
    unplaced: list[int] = []
    max_evictions = n  # hard guard; the argument in the module docstring says it is never hit

    def evict_from(d: int, evict: np.ndarray, ck: float) -> int:
        """Take ``evict`` off worker d and back onto the heap, for a key of cost ck (Adjust's
        exchange and hot-key isolation share it); returns how many keys were evicted."""
        if trace is not None:
            trace.append((ck, cost[evict].copy()))
        removed = float(cost[evict].sum())
        assign[evict] = -1
        loads[d] -= removed
        resident[d] -= removed
        for e in evict:
            heapq.heappush(heap, (-float(cost[e]), int(rank[e]), int(e)))
        return int(evict.size)

    while heap:
        negc, _, k = heapq.heappop(heap)
        ck = -negc
        fk, hk = physical[k], home[k]
        pref = np.lexsort((worker_ids, worker_ids != hk, worker_ids != fk, loads))
        placed_on = -1
        for d in pref:
            if loads[d] + ck <= limit:
                placed_on = int(d)
                break
            need = loads[d] + ck - limit
            if resident[d] < need or evictions >= max_evictions:
                continue
            evict = _adjust(d, ck, need, grouped[bounds[d] : bounds[d + 1]], assign, cost)
            if evict is None:
                continue
            evictions += evict_from(int(d), evict, ck)
            placed_on = int(d)
            break
        if placed_on < 0:
            unplaced.append(k)
            if ck > limit:
                # A key heavier than the cap on its own: isolate it. Pick the worker whose
                # unmovable load (cold + already placed) is smallest, preferring F(k) then h(k),
                # and evict every lighter resident so the overload is c_k alone.
                fixed = loads - resident
                placed_on = int(np.lexsort((worker_ids, worker_ids != hk, worker_ids != fk, fixed))[0])
                seq = grouped[bounds[placed_on] : bounds[placed_on + 1]]
                c = cost[seq]
                evict = seq[(assign[seq] == placed_on) & (c < ck) & (c >= crumb) & (c > 0)]
                # Evict in R order only until the worker is within the tolerance slack of c_k
                # alone: evicting every crumb would bloat the table for no real gain.
                excess = loads[placed_on] - (fixed[placed_on] + slack)
                if evict.size and excess > 0:
                    csum = np.cumsum(cost[evict])
                    evict = evict[: int(np.searchsorted(csum, excess - tol, side="left")) + 1]
                else:
                    evict = evict[:0]
                if evict.size:
                    evictions += evict_from(placed_on, evict, ck)
            else:
                placed_on = int(pref[0])
        assign[k] = placed_on
        loads[placed_on] += ck
    return PhaseResult(assign, loads, int(cand.size), evictions, unplaced)


def _adjust(
    d: int, ck: float, need: float, seq: np.ndarray, assign: np.ndarray, cost: np.ndarray
) -> np.ndarray | None:
    """Exchangeable set E on worker d for a key of cost ck, or None.

    Greedy prefix in R order over residents with ``0 < c_e < c_k`` whose removal frees ``need``.
    Scans ``seq`` in geometrically growing chunks: E is almost always found in the first chunk.
    """
    acc = 0.0
    chosen: list[np.ndarray] = []
    pos, chunk_len = 0, _FIRST_CHUNK
    while pos < seq.size:
        chunk = seq[pos : pos + chunk_len]
        c = cost[chunk]
        sel = chunk[(assign[chunk] == d) & (c < ck) & (c > 0)]
        if sel.size:
            csum = acc + np.cumsum(cost[sel])
            j = int(np.searchsorted(csum, need, side="left"))
            if j < sel.size:
                chosen.append(sel[: j + 1])
                return np.concatenate(chosen)
            chosen.append(sel)
            acc = float(csum[-1])
        pos += chunk_len
        chunk_len *= 4
    return None
