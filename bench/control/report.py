"""Percentiles, the JSON report and the printed table.

Why the percentiles of the split are taken per part: they are the parts' own distributions (what
bounds the latency is the part whose p99 is large), so they do not add up to the total's p99.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from bench.control.params import TARGET_P99_MS


def summary(values: list[float]) -> dict[str, float]:
    if not values:
        return {"p50": float("nan"), "p99": float("nan"), "max": float("nan"), "mean": float("nan")}
    a = np.asarray(values, dtype=np.float64)
    return {
        "p50": round(float(np.percentile(a, 50)), 1),
        "p99": round(float(np.percentile(a, 99)), 1),
        "max": round(float(a.max()), 1),
        "mean": round(float(a.mean()), 1),
    }


def brief(s: dict[str, float]) -> str:
    """One progress line's worth of a summary."""
    return f"p50 {s['p50']:.1f} ms, p99 {s['p99']:.1f} ms, max {s['max']:.1f} ms"


def print_table(cases: list[dict[str, Any]]) -> None:
    split = "".join(f" {p + ' p50/p99':>15}" for p in ("control", "router", "commit"))
    print()
    print(f"{'routers':>7} {'load':<7} {'p50':>7} {'p99':>7} {'max':>7}  {split}   (ms)")
    for c in cases:
        lat, sp = c["latency_ms"], c["split_ms"]
        parts = "".join(
            f" {sp[p]['p50']:>7.1f}/{sp[p]['p99']:<7.1f}" for p in ("control", "router", "commit")
        )
        total = f"{lat['p50']:>7.1f} {lat['p99']:>7.1f} {lat['max']:>7.1f}"
        print(f"{c['routers']:>7} {c['load']:<7} {total}  {parts}")
    met = all(c["latency_ms"]["p99"] < TARGET_P99_MS for c in cases)
    print(f"target p99 < {TARGET_P99_MS:.0f} ms: {'met in every case' if met else 'not met in every case'}")
