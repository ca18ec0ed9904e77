"""The acceptance's verdicts, computed from the measured series (never written by hand).

Pure: lag samples (the benchmark's exact time lag, :mod:`bench.shed.lag`), the keep-probability
in force (:mod:`ballast.harness.control_series`), the phases' times and the judged windows in; figures and
booleans out.

* **Lag under overload** (acceptance 2). The lag judged is the pipeline's, router plus reduce: a
  record waits in the input for the routers, then in the routed topic for the reduce.
  *On*: every stretch of the overload (and of the ``cycles`` cycles after it) in which the lag is
  above the target ends within ``cycles`` policy cycles of its start, the last included (a stretch
  still open at the end of the samples fails). A lag never above the target passes.
  *Off*: the lag grows without bound during the overload: over its second half it rose by at least
  ``min_growth`` s per s (least squares), and it ended above the target.
* **Lifting** (acceptance 6). The keep in force is back at 1 within ``cycles`` cycles of the
  overload's end, and stays there.
* **Exact again** (acceptance 6). Every window that starts once the lift was applied by the
  routers (every routed partition announced its epoch) has a final row that is exact and equals the
  truth, and there is at least one such window.
* **Coverage** (acceptance 4). The share of shed windows whose true count, and true sum, lie in
  their 95 % interval is within [0.90, 0.99], over at least ``min_windows`` shed windows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

COVERAGE_BAND = (0.90, 0.99)
MIN_SHED_WINDOWS = 100


def pipeline_lag(samples: Sequence[Mapping[str, Any]]) -> list[tuple[int, float]]:
    """(at ms, router + reduce time lag in s) of the samples that have both."""
    return [
        (int(s["at_ms"]), float(s["router_s"]) + float(s["reduce_s"]))
        for s in samples
        if s.get("router_s") is not None and s.get("reduce_s") is not None
    ]


def lag_summary(samples: Sequence[Mapping[str, Any]], lo_ms: int, hi_ms: int | None = None) -> dict[str, Any]:
    """p50, p90 and max of the pipeline lag sampled in ``[lo, hi]``: with calm input, the lag the
    pipeline has when it keeps up (the target must be at least twice it)."""
    values = [v for at, v in pipeline_lag(samples) if at >= lo_ms and (hi_ms is None or at <= hi_ms)]
    if not values:
        return {"p50_s": None, "p90_s": None, "max_s": None, "samples": 0}
    arr = np.array(values)
    return {
        "p50_s": round(float(np.median(arr)), 2),
        "p90_s": round(float(np.quantile(arr, 0.9)), 2),
        "max_s": round(float(arr.max()), 2),
        "samples": len(values),
    }


def excursions(lag: Sequence[tuple[int, float]], target_s: float, lo_ms: int, hi_ms: int) -> list[dict]:
    """Stretches of ``[lo, hi]`` with the lag above the target: from the first sample above to the
    first sample back at or under it (``end_ms`` None: still above at the last sample)."""
    out: list[dict] = []
    current: dict | None = None
    for at, value in lag:
        if at < lo_ms:
            continue
        if at > hi_ms and current is None:
            break
        if value > target_s and current is None:
            current = {"start_ms": at, "end_ms": None, "peak_s": value}
            out.append(current)
        elif current is not None:
            if value > target_s:
                current["peak_s"] = max(current["peak_s"], value)
            else:
                current["end_ms"] = at
                current = None
    return out


def lag_on(lag: Sequence[tuple[int, float]], target_s: float, cycle_s: float, cycles: int,
           overload: tuple[int, int]) -> dict[str, Any]:  # fmt: skip
    """Acceptance 2 with shedding on (see the module docstring)."""
    bound_ms = cycles * cycle_s * 1000
    lo, hi = overload
    found = excursions(lag, target_s, lo, hi + bound_ms)
    longest = 0.0
    ok = True
    for x in found:
        if x["end_ms"] is None:
            ok = False
            longest = float("inf")
        else:
            longest = max(longest, (x["end_ms"] - x["start_ms"]) / 1000)
    ok = ok and longest <= bound_ms / 1000
    during = [v for at, v in lag if lo <= at <= hi]
    return {
        "back_under_target": bool(ok and during),
        "excursions": len(found),
        "longest_over_target_s": None if longest == float("inf") else round(longest, 1),
        "bound_s": round(bound_ms / 1000, 1),
        "peak_lag_s": round(max(during), 2) if during else None,
        "end_lag_s": round(during[-1], 2) if during else None,
    }


def lag_off(lag: Sequence[tuple[int, float]], target_s: float, min_growth: float,
            overload: tuple[int, int]) -> dict[str, Any]:  # fmt: skip
    """Acceptance 2 with shedding off: the lag grows without bound (see the module docstring)."""
    lo, hi = overload
    mid = (lo + hi) / 2
    second = [(at, v) for at, v in lag if mid <= at <= hi]
    during = [v for at, v in lag if lo <= at <= hi]
    slope = None
    if len(second) >= 3:
        t = np.array([at for at, _ in second], dtype=float) / 1000
        v = np.array([x for _, x in second], dtype=float)
        slope = float(np.polyfit(t - t[0], v, 1)[0])
    end = during[-1] if during else None
    grows = slope is not None and end is not None and slope >= min_growth and end > target_s
    return {
        "grows_without_bound": bool(grows),
        "growth_s_per_s": None if slope is None else round(slope, 3),
        "min_growth": min_growth,
        "peak_lag_s": round(max(during), 2) if during else None,
        "end_lag_s": None if end is None else round(end, 2),
    }


def lifting(keeps: Sequence[Mapping[str, Any]], overload_end_ms: int, cycle_s: float,
            cycles: int, overload_start_ms: int | None = None) -> dict[str, Any]:  # fmt: skip
    """Acceptance 6, its first half: shedding lifted within ``cycles`` cycles of the overload's end.
    Also whether anything was shed before the overload began (calm input: nothing should be)."""
    shed = [k for k in keeps if k["keep"] < 1.0]
    early = [k for k in shed if overload_start_ms is not None and int(k["at_ms"]) < overload_start_ms]
    lowest = min((k["keep"] for k in keeps), default=1.0)
    last_lift = keeps[-1] if keeps and keeps[-1]["keep"] >= 1.0 else None
    lifted_ms = None if last_lift is None or not shed else int(last_lift["at_ms"])
    after = None if lifted_ms is None else round(max(0, lifted_ms - overload_end_ms) / 1000, 1)
    return {
        "shed": bool(shed),
        "lowest_keep": round(lowest, 4),
        "changes": len(keeps),
        "lifted_at_ms": lifted_ms,
        "lifted_epoch": None if last_lift is None or not shed else int(last_lift["epoch"]),
        "lifted_after_overload_s": after,
        "bound_s": round(cycles * cycle_s, 1),
        "lifted_in_time": bool(after is not None and after <= cycles * cycle_s),
        "shed_before_overload": len(early),
    }


def exact_again(first_exact_ms: int | None, applied_ms: int | None, window_ms: int,
                overload_end_ms: int, margin_ms: int = 0) -> dict[str, Any]:  # fmt: skip
    """Acceptance 6, its second half: every window starting ``margin_ms`` or more after the lift was
    applied is exact. A row is exact unless a router reported shedding records of its window
    (docs/results.md), so with routers keeping up, the first window after the lift is; a margin
    allows for routers that lag their input at the lift (records of later windows still shed)."""
    # the first window starting at least the margin after the lift was applied
    due = None if applied_ms is None else -(-(applied_ms + margin_ms) // window_ms) * window_ms
    ok = first_exact_ms is not None and due is not None and first_exact_ms <= due
    return {
        "exact_again": bool(ok),
        "lift_applied_at_ms": applied_ms,
        "exact_margin_ms": margin_ms,
        "first_window_due_ms": due,
        "first_exact_window_ms": first_exact_ms,
        "first_exact_after_overload_s": None
        if first_exact_ms is None
        else round((first_exact_ms - overload_end_ms) / 1000, 1),
    }


def covered(cov: Mapping[str, Any], band: tuple[float, float] = COVERAGE_BAND,
            min_windows: int = MIN_SHED_WINDOWS) -> dict[str, Any]:  # fmt: skip
    """Acceptance 4: count and sum coverage within ``band`` over enough shed windows."""
    lo, hi = band

    def inside(x: float | None) -> bool:
        return x is not None and lo <= x <= hi

    enough = cov["shed_windows"] >= min_windows
    return {
        "band": list(band),
        "min_windows": min_windows,
        "enough_windows": enough,
        "count_in_band": inside(cov["count"]),
        "sum_in_band": inside(cov["sum"]),
        # a row that says no estimate reports no interval, but what it saw may not exceed the truth
        "no_estimate_honest": cov.get("no_estimate_over", 0) == 0,
        "covered": bool(
            enough and inside(cov["count"]) and inside(cov["sum"]) and cov.get("no_estimate_over", 0) == 0
        ),
    }
