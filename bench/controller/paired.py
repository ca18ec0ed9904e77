"""Forecast against last interval, seed by seed: the paired difference and whether it is noise.

"Seeds won" alone cannot tell level from ahead: 3 of 5 happens by chance a third of the time. Each
seed runs both policies on the same trace, so the per-seed differences are paired, and their mean
with a Student-t 95 % interval says whether the forecast is ahead (the interval lies below 0),
behind (above 0) or level (it holds 0). With 5 seeds the interval is wide; ``--seeds 11-40``
narrows it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# Student-t 97.5 % quantiles for 1..30 degrees of freedom; beyond 30, the Cornish-Fisher expansion
# below is within 0.001 of the exact value.
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
         2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
         2.052, 2.048, 2.045, 2.042)


def t975(df: int) -> float:
    """The two-sided 95 % Student-t quantile for ``df`` degrees of freedom."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    if df <= len(_T975):
        return _T975[df - 1]
    z = 1.959964
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


@dataclass(frozen=True)
class Paired:
    """``policy - baseline`` in realized max/mean over seeds (negative: the policy balanced better)."""

    mean: float
    half_width: float  # of the 95 % interval; nan with one seed
    won: int
    seeds: int

    @property
    def verdict(self) -> str:
        if not math.isfinite(self.half_width):
            return "ahead" if self.mean < 0 else "behind" if self.mean > 0 else "level"
        if self.mean + self.half_width < 0:
            return "ahead"
        if self.mean - self.half_width > 0:
            return "behind"
        return "level"


def paired(policy: list[float], baseline: list[float]) -> Paired:
    """The paired comparison of per-seed figures (same seeds, same order)."""
    if len(policy) != len(baseline) or not policy:
        raise ValueError("one figure per seed for each, and at least one seed")
    diffs = [p - b for p, b in zip(policy, baseline, strict=True)]
    n = len(diffs)
    mean = sum(diffs) / n
    if n == 1:
        half = math.nan
    else:
        sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1))
        half = t975(n - 1) * sd / math.sqrt(n)
    return Paired(mean, half, sum(d < 0 for d in diffs), n)
