"""The mean of interval t+1 given interval t on the paper's swaps: the best a point forecast can do.

On the paper's hot-set swaps (every swap on an interval boundary, :class:`ZipfWorkload`) the
per-key rates form a Markov chain: interval t+1 is interval t after one :func:`fluctuate` step
with a fresh draw. So the mean of t+1 given t can be computed, by drawing that step many times
from t. In squared error it is the best point forecast that anyone, with any history, could give.

No controller can compute it: it does not know the generator. The benchmark does, to answer one
question. Is the last interval's lead on these swaps a weakness of our forecast, or of point
forecasts as such? docs/controller.md has the answer measured (the ``expected`` policy): planning
on the exact mean is worse than planning on the last interval. The mean shares each hot key's small
chance of cooling out over every hot key, while the realized max is set by the keys that do not
cool. For each key the likeliest next value is its last one (no key is likely to be swapped), so
the last interval is the per-key mode, and the mode is what a plan against the max wants here.
"""

from __future__ import annotations

import numpy as np

from ballast.planner.workloads import ZipfWorkload, fluctuate
from ballast.routing.murmur2 import kafka_partition_array

# Monte Carlo draws per interval. A hot key's mean is off by about 1/sqrt(200) of its chance of
# cooling times its load: well below the differences the mean is used to explain.
DRAWS = 200


class ExpectedNext:
    """Guesses interval t+1 as the mean over ``draws`` fresh swap steps from interval t.

    Its random draws come from a generator of its own, so the workload's trace is the one every
    other policy sees.
    """

    def __init__(self, workload: ZipfWorkload, draws: int = DRAWS) -> None:
        if draws < 1:
            raise ValueError(f"draws must be >= 1, got {draws}")
        self.workload = workload
        self.draws = draws
        self.home = kafka_partition_array(workload.hash_raw, workload.num_workers)
        self.rng = np.random.default_rng([workload.seed, 0x5EED])
        self.last: np.ndarray | None = None

    def observe(self, c: np.ndarray) -> None:
        self.last = np.asarray(c, dtype=np.float64)

    def guess(self) -> np.ndarray:
        assert self.last is not None, "observe an interval first"
        total = float(self.last.sum())
        if total <= 0:
            return self.last.copy()
        p = self.last / total
        acc = np.zeros_like(p)
        for _ in range(self.draws):
            q, _ = fluctuate(p, self.home, self.workload.num_workers, self.workload.f, self.rng)
            acc += q
        return acc * (total / self.draws)
