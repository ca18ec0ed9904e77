"""AutoFlow's hotspot-diminishing (A-Alg3): move whole hash slots from the busiest to the idlest worker.

Slots: ``slot = toPositive(murmur2(k)) % S`` with ``S = N * slots_per_worker``. Because ``N``
divides ``S``, the default owner of slot ``s`` is ``s % N`` and that equals ``h(k)`` for every key
in it: with an untouched slot table AutoFlow routes exactly like Kafka (and like the other
planners' empty routing table). The paper gives no slot count; 16 per worker is our default.

One round (faithful to the paper): ``mx = argmax L``, ``mn = argmin L``; if
``(L_mx - L_mn) / L_mx >= factor``, walk mx's slots by descending load and move every slot that
still fits in ``gap = (L_mx - L_mn) / 2`` (first-fit decreasing; a slot bigger than the remaining
gap is skipped, so one hot slot can never be fixed). Decisions:

* ``max_rounds = 1`` by default: AutoFlow does one pair per control epoch and Ballast plans once
  per interval. More rounds are allowed for experiments.
* ``factor = 0`` by default: Ballast's own trigger (``max/mean > 1 + theta_max``) decides *whether*
  to plan; AutoFlow's relative-gap trigger is kept as a parameter.
* Zero-load slots are never moved (they relieve nothing).
* The slot table is derived from the current assignment (``owner[slot(k)] = F(k)`` for table keys),
  so the planner stays stateless like the others. The reported table size is the number of
  slots away from their default owner (what an AutoFlow router stores); key-level entries are in
  ``Plan.key_entries``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ballast.planner.heuristics import heavy_keys, tolerance
from ballast.planner.interface import Plan, Timer, as_current
from ballast.planner.stats import KeyStats


def hotspot_round(slot_load: np.ndarray, owner: np.ndarray, loads: np.ndarray, factor: float) -> list[int]:
    """One PROCESS_WINDOW round; returns the slots to move from the busiest to the idlest worker."""
    mx = int(np.argmax(loads))
    mn = int(np.argmin(loads))
    diff = float(loads[mx] - loads[mn])
    if loads[mx] <= 0 or diff <= 0 or diff / float(loads[mx]) < factor:
        return []
    gap = diff / 2.0
    mine = np.flatnonzero(owner == mx)
    mine = mine[np.argsort(-slot_load[mine], kind="stable")]
    moved: list[int] = []
    for s in mine.tolist():
        if gap <= 0:
            break
        n = float(slot_load[s])
        if 0 < n <= gap:
            moved.append(s)
            gap -= n
    return moved


@dataclass
class AutoFlowPlanner:
    theta_max: float = 0.08
    slots_per_worker: int = 16
    factor: float = 0.0
    max_rounds: int = 1
    name: str = "AutoFlow"

    def plan(self, stats: KeyStats, current: np.ndarray | Mapping) -> Plan:
        if stats.hash_raw is None:
            raise ValueError("AutoFlow needs hash_raw in the statistics to derive slots")
        cur = as_current(stats, current)
        with Timer() as t:
            nw = stats.num_workers
            n_slots = nw * self.slots_per_worker
            slot = (stats.hash_raw % np.uint32(n_slots)).astype(np.int64)
            default_owner = (np.arange(n_slots) % nw).astype(np.int32)
            owner = default_owner.copy()
            off = np.flatnonzero(cur != stats.home)
            owner[slot[off]] = cur[off]
            slot_load = np.bincount(slot, weights=stats.cost, minlength=n_slots)
            loads = np.bincount(owner, weights=slot_load, minlength=nw) + stats.cold_load
            rounds = 0
            for _ in range(self.max_rounds):
                mx, mn = int(np.argmax(loads)), int(np.argmin(loads))
                moved = hotspot_round(slot_load, owner, loads, self.factor)
                if not moved:
                    break
                rounds += 1
                shift = float(slot_load[moved].sum())
                owner[moved] = mn
                loads[mx] -= shift
                loads[mn] += shift
            assign = owner[slot]
            loads = stats.loads(assign)
        cap = stats.cap(self.theta_max)
        return Plan(
            self.name, stats, cur, assign, loads, cap, t.elapsed,
            feasible=bool(loads.max() <= cap + tolerance(stats)),
            infeasible_keys=heavy_keys(stats, cap),
            iterations=max(rounds, 1),
            table_size_override=int(np.count_nonzero(owner != default_owner)),
            meta={"rounds": rounds, "slots": n_slots},
        )
