"""Heavy hitters in bounded memory: Misra-Gries counters merged a batch at a time.

Why this shape: the router sees 10^5 records/s, too many for a per-record Python sketch update.
It counts each batch exactly (``collections.Counter`` runs in C) and merges the batch into the
summary, which is the mergeable form of Misra-Gries / Space-Saving (Agarwal et al., "Mergeable
Summaries", PODS 2012):

* merge: add the batch's counts to the counters;
* when more than ``2 * capacity`` counters exist, let ``c`` be the ``(capacity+1)``-th largest
  counter, subtract ``c`` from every counter and drop those ``<= 0``; add ``c`` to ``decrement``.

Error bound (what RouterKeyStats publishes). With ``N`` the weight seen and ``m`` the capacity,
every prune removes at least ``(m+1)·c`` from the counter total, which never exceeds ``N``, so the
total decrement ``D <= N / (m+1)``. For every key, ``counter <= true <= counter + D``; a key with
true count ``> D`` (in particular ``> N/(m+1)``) is always monitored. Reported counts are the
upper estimate ``counter + D`` with ``error = D``: never below the true count, at most ``D``
above (the schema's contract). Memory: at most ``2m`` counters plus one batch.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from itertools import compress

import numpy as np


class HeavyHitters:
    def __init__(self, capacity: int = 10_000) -> None:
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        self.capacity = capacity
        self.counters: dict[Hashable, int] = {}
        self.decrement = 0
        self.total = 0

    def update(self, counts: Mapping[Hashable, int]) -> None:
        """Merge one batch's exact counts (key -> occurrences)."""
        c = self.counters
        get = c.get
        for key, n in counts.items():
            c[key] = get(key, 0) + n
        self.total += sum(counts.values())
        if len(c) > 2 * self.capacity:
            self._prune()

    def _prune(self) -> None:
        m = self.capacity
        keys = list(self.counters)
        vals = np.fromiter(self.counters.values(), dtype=np.int64, count=len(keys))
        cut = int(np.partition(vals, len(vals) - (m + 1))[len(vals) - (m + 1)])
        keep = vals > cut
        self.counters = dict(zip(compress(keys, keep), (vals[keep] - cut).tolist(), strict=True))
        self.decrement += cut

    @property
    def error_bound(self) -> int:
        """``D``: the most any reported count exceeds the true one (``<= total / (capacity+1)``)."""
        return self.decrement

    def top(self, k: int) -> list[tuple[Hashable, int, int]]:
        """The ``k`` largest as (key, upper-estimate count, error), largest first."""
        d = self.decrement
        items = sorted(self.counters.items(), key=lambda kv: kv[1], reverse=True)[:k]
        return [(key, n + d, d) for key, n in items]

    def estimate(self, key: Hashable) -> tuple[int, int]:
        """(upper estimate, error) for any key; unmonitored keys have true count <= D."""
        return self.counters.get(key, 0) + self.decrement, self.decrement

    def copy(self) -> HeavyHitters:
        """An independent summary with the same counters (to render without committing)."""
        other = HeavyHitters(self.capacity)
        other.counters = dict(self.counters)
        other.decrement = self.decrement
        other.total = self.total
        return other

    def reset(self) -> None:
        self.counters = {}
        self.decrement = 0
        self.total = 0
