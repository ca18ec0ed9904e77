"""Mixed (the paper's Alg. 4): MinMig that cleans just enough of the table to fit ``A_max``.

Trial ``n`` moves back the ``n`` table keys with the smallest window memory (R_I: cheapest to
move back first), then runs MinMig's Phases II/III (R_II: highest ``gamma = c**beta / M``).
It starts at ``n = 0`` (pure MinMig) and, while the table overshoots by ``delta = |A'| - A_max``,
retries with ``n += delta``.

Decisions where the paper is vague (documented in docs/planners.md, tested in
tests/unit/planner/test_planner_mixed.py):

* **n update.** The paper's rule (``search="paper"``) is cumulative and capped,
  ``n <- min(|A|, n + delta)``: ``n`` strictly grows, so at most ``|A| + 1`` trials. Measured, it
  can crawl (delta = 1 for thousands of trials when cleaning light keys makes Phase II add new
  entries: 76 s at K = 1e5). The default ``search="gallop"`` takes steps of
  ``max(delta, 2 * previous step)`` until the table fits, then bisects between the last failing and
  the first fitting ``n`` (to within 1/8 of ``n``) and keeps the best fitting trial:
  O(log |A|) trials, every trial a distinct ``n`` in ``[0, |A|]`` (so still at most ``|A| + 1``),
  and an ``n`` not much larger than needed.
* **Last trial (n = |A|)** cleans everything; it evaluates both R_II order and MinTable's cost
  order and keeps the better (fits the table, then balanced, then lower migration). So Mixed's
  table fits whenever MinTable's does, which the paper asserts but its Alg. 4 does not guarantee
  (MinTable uses a different R).
* **Nothing fits**: return the balanced trial with the smallest table (else the least overloaded)
  and flag ``table_overflow``; never raise.
* **Balance safety net**: if no trial meets the cap, no single key exceeds it and the cold load
  allows it, run Simple (LPT). Its plan is taken when it meets the cap and its table fits (or no
  trial fitted either). This makes "Mixed is never worse balanced than Simple where Simple meets
  the cap" true by construction, within the table limit (the paper's Theorem 4 is informal).
* **Infeasible single hot key** (``c_k > cap``): not an error. The plan is returned with
  ``feasible = False`` and the key in ``infeasible_keys``; the rest is still balanced as well as
  LLFD can.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ballast.planner.baselines import lpt_assign
from ballast.planner.heuristics import finish, heavy_keys, run_trial, tolerance
from ballast.planner.interface import Plan, Timer, as_current
from ballast.planner.llfd import PhaseResult, migration_priority, r_order
from ballast.planner.stats import KeyStats


@dataclass
class MixedPlanner:
    theta_max: float = 0.08
    a_max: int = 3000
    beta: float = 1.5
    safety_net: bool = True
    search: str = "gallop"  # "paper": n += overuse (Alg. 4 line 10); "gallop": doubling + bisection
    name: str = "Mixed"

    def plan(self, stats: KeyStats, current: np.ndarray | Mapping) -> Plan:
        cur = as_current(stats, current)
        with Timer() as t:
            cap = stats.cap(self.theta_max)
            tol = tolerance(stats)
            home = stats.home
            order_mig = r_order(migration_priority(stats.cost, stats.mem, self.beta))
            table_keys = np.flatnonzero(cur != home)
            r_clean = table_keys[np.argsort(stats.mem[table_keys], kind="stable")]
            n_table = r_clean.size

            def score(res: PhaseResult) -> tuple:
                size = res.table_size(home)
                mc = float(stats.mem[res.assign != cur].sum())
                return (size > self.a_max, bool(res.loads.max() > cap + tol), mc, size)

            results: dict[int, PhaseResult] = {}

            def trial(n: int) -> PhaseResult:
                res = run_trial(stats, cur, r_clean[:n], order_mig, cap)
                if n >= n_table:
                    # Final trial: also MinTable's criterion, keep the better of the two.
                    res_mt = run_trial(stats, cur, r_clean, r_order(stats.cost), cap)
                    res = min((res, res_mt), key=score)
                results[n] = res
                return res

            def fits(res: PhaseResult) -> bool:
                return res.table_size(home) <= self.a_max

            n, step, lo, hi = 0, 0, 0, -1
            res = trial(0)
            if fits(res):
                hi = 0
            while hi < 0 and n < n_table:
                delta = res.table_size(home) - self.a_max
                # paper: n += overuse; gallop: the step at least doubles, so O(log |A|) trials.
                step = delta if self.search == "paper" else max(delta, 2 * step)
                lo, n = n, min(n_table, n + step)
                res = trial(n)
                if fits(res):
                    hi = n
            if hi > 0 and self.search == "gallop":
                # Bisect back towards the smallest fitting n: less cleaning, less migration.
                while hi - lo > max(1, hi // 8):
                    mid = (lo + hi) // 2
                    if fits(trial(mid)):
                        hi = mid
                    else:
                        lo = mid
            iterations = len(results)
            fitting = [r for r in results.values() if fits(r)]
            chosen: PhaseResult | None = min(fitting, key=score) if fitting else None
            trials = list(results.values())
            overflow = chosen is None
            if chosen is None:
                # Best effort: fewest table violations first, then balance, then table size.
                chosen = min(trials, key=lambda r: (bool(r.loads.max() > cap + tol), r.table_size(home)))

            cleaned = next((m for m, r in results.items() if r is chosen), -1)
            used_safety = False
            if self.safety_net and chosen.loads.max() > cap + tol and self._lpt_can_help(stats, cap, tol):
                lpt, lpt_loads = lpt_assign(stats)
                lpt_size = int(np.count_nonzero(lpt != home))
                if lpt_loads.max() <= cap + tol and (lpt_size <= self.a_max or overflow):
                    chosen = PhaseResult(lpt, lpt_loads)
                    overflow = lpt_size > self.a_max
                    used_safety = True

        plan = finish(self.name, stats, cur, chosen, cap, t.elapsed, iterations=iterations,
                      a_max=self.a_max, meta={"cleaned": cleaned, "safety_net": used_safety})
        plan.table_overflow = overflow or plan.key_entries > self.a_max
        return plan

    @staticmethod
    def _lpt_can_help(stats: KeyStats, cap: float, tol: float) -> bool:
        """LPT cannot meet the cap if one key or one worker's cold load alone exceeds it."""
        return heavy_keys(stats, cap).size == 0 and bool(stats.cold_load.max() <= cap + tol)
