"""The reduce's cost model: a micro-batch engine is not DS2's record-at-a-time operator.

A Spark micro-batch pays a **fixed** cost that does not grow with its rows (planning, the state
store's commit, scheduling, the offset and commit logs) and a **per-row** cost shared by its
workers. We model a batch's duration as::

    duration = fixed + rows × cost_per_row / workers

fitted over recent batches (``rows / workers`` against ``duration``) by Theil-Sen: the slope is the
median of the pairwise slopes, the fixed cost the median of what each batch leaves of its duration
at that slope. Why not least squares: one batch far off the line decides it. A query's first batch
(Python workers spawned, the state store opened, the plan compiled) read 9 rows in 24 s where the
others took ~3.3 s + 2 ms a row, and least squares made the fixed cost 12 s, past the trigger, so
DS2 asked for nothing; a batch that ships state in a migration is the same kind of outlier. The
median ignores up to ~29 % of such batches. What DS2
needs from it is a true rate per instance: the rows a worker can carry per second while each batch
still ends within the trigger interval ``T`` (a batch that ends later makes the next one larger, and
the lag grows)::

    rate per worker = (T − fixed) / (cost_per_row × T)

Why not records ÷ busy seconds as for routers: with a fixed cost per batch that quotient depends on
the batch size, so it rises with load and DS2 would keep finding "enough" capacity until the
fixed cost alone filled the trigger. A fixed cost at or above ``T`` means no number of workers
keeps up at that trigger: the model says so instead of asking for more workers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class BatchSample:
    rows: int
    workers: int
    duration_s: float


@dataclass(frozen=True)
class BatchModel:
    fixed_s: float
    cost_per_row_s: float
    samples: int
    r2: float  # how much of the durations' spread the model explains

    def duration_s(self, rows: float, workers: int) -> float:
        return self.fixed_s + rows * self.cost_per_row_s / workers

    def rate_per_worker(self, trigger_s: float) -> float | None:
        """Rows per second one worker carries with each batch inside ``trigger_s``; None when the
        fixed cost alone fills the trigger (more workers cannot help)."""
        if trigger_s <= self.fixed_s or self.cost_per_row_s <= 0:
            return None
        return (trigger_s - self.fixed_s) / (self.cost_per_row_s * trigger_s)


def fit(samples: Sequence[BatchSample], min_samples: int = 5) -> BatchModel | None:
    """The least-squares model of ``samples``; None with too few batches or no spread of rows
    per worker to separate the fixed cost from the per-row one. Fixed cost floored at zero."""
    if len(samples) < min_samples:
        return None
    x = np.array([s.rows / s.workers for s in samples], dtype=np.float64)
    y = np.array([s.duration_s for s in samples], dtype=np.float64)
    if np.ptp(x) <= 0.05 * max(float(np.mean(x)), 1.0):
        return None
    i, j = np.triu_indices(len(x), k=1)
    apart = x[j] != x[i]
    slope = float(np.median((y[j] - y[i])[apart] / (x[j] - x[i])[apart]))
    intercept = float(np.median(y - slope * x))
    if intercept < 0:  # a negative fixed cost is noise: through the origin, each batch's own rate
        intercept, slope = 0.0, float(np.median(y[x > 0] / x[x > 0]))
    predicted = intercept + slope * x
    spread = float(np.sum((y - y.mean()) ** 2))
    r2 = 1.0 - float(np.sum((y - predicted) ** 2)) / spread if spread > 0 else 1.0
    return BatchModel(float(intercept), float(max(slope, 0.0)), len(samples), r2)
