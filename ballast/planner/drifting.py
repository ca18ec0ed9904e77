"""Drifting workloads whose changes happen at instants *inside* intervals, for the controller's loop.

Why not only :class:`~ballast.planner.workloads.ZipfWorkload`: there every swap lands exactly on an
interval boundary, so interval t-1 holds no trace of what changes in t and no forecast can see it
coming. A real stream changes whenever it likes; an interval's records are the key's rate
integrated over the interval, so a change in the middle of interval t-1 shows there partly and in
t fully. That partial trace is what a forecast can use, and what "plan on the last interval"
ignores. Both workloads here are seeded and produce one expected-or-sampled count vector per
interval, like the planner's workloads (``keys``, ``hash_raw``, ``intervals(T)``, ``state(c)``).

* :class:`TimedSwapWorkload`: the paper's hot-set swaps (the same pairs as
  :func:`~ballast.planner.workloads.swap_pairs`, the same fluctuation rate ``f``), each pair swapping
  at a uniformly random instant of its interval.
* :class:`BurstWorkload`: a fixed Zipf background plus heavy-tailed bursts on random keys. A burst
  starts at a random instant, ramps up, holds for an exponentially distributed time and then decays
  with a random half-life: bursts rise and fade at irregular times, their peaks Pareto-distributed.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from ballast.planner.workloads import swap_pairs
from ballast.routing.murmur2 import kafka_partition_array, murmur2_array
from ballast.workload import zipf_probabilities


def _keys(num_keys: int) -> tuple[list[bytes], np.ndarray]:
    keys = [str(k).encode() for k in range(num_keys)]
    return keys, murmur2_array(keys)


@dataclass
class TimedSwapWorkload:
    """Zipf(z) with the paper's swaps at fluctuation rate ``f``, each swap at a random instant.

    A pair swaps at a uniformly random instant of its interval. With ``fade_max = 0`` the swap is a
    step: a pair swapping at fraction ``s`` of interval t contributes ``s * old + (1 - s) * new``
    to t and ``new`` from t+1 on. With ``fade_max > 0`` each swap is a linear cross-fade lasting
    U(0, ``fade_max``) intervals from that instant (a hot set that takes a while to shift). A key
    swapped again mid-fade starts its new fade from the rate it had reached. Counts are expected
    values (no sampling noise), as in ZipfWorkload.
    """

    num_keys: int = 10_000
    z: float = 0.85
    f: float = 1.0
    num_workers: int = 20
    seed: int = 1
    fade_max: float = 0.0
    records_per_interval: float = 1e6
    state_per_record: float = 1.0
    substeps: int = 16
    keys: list[bytes] = field(init=False, repr=False)
    hash_raw: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.keys, self.hash_raw = _keys(self.num_keys)

    @property
    def name(self) -> str:
        fade = f",fade<={self.fade_max}" if self.fade_max else ""
        return f"timed-swaps(z={self.z},K={self.num_keys},f={self.f}{fade})"

    def intervals(self, count: int) -> Iterator[np.ndarray]:
        rng = np.random.default_rng(self.seed)
        home = kafka_partition_array(self.hash_raw, self.num_workers)
        p = np.empty(self.num_keys)
        p[rng.permutation(self.num_keys)] = zipf_probabilities(self.num_keys, self.z)
        # per key: the fade in force, rate(tau) = old + (new - old) * clip((tau - start) / length, 0, 1)
        old, start, length = p.copy(), np.zeros(self.num_keys), np.zeros(self.num_keys)
        grid = (np.arange(self.substeps) + 0.5) / self.substeps
        for t in range(count):
            if t:
                q, _, pairs = swap_pairs(p, home, self.num_workers, self.f, rng)
                if len(pairs):
                    at = t + rng.random(len(pairs))
                    dur = rng.random(len(pairs)) * self.fade_max
                    for col in (0, 1):
                        k = pairs[:, col]
                        old[k] = _fade(old[k], p[k], start[k], length[k], at)
                        start[k], length[k] = at, dur
                p = q
            active = np.flatnonzero(start + length > t)
            c = p.copy()
            if active.size:
                if self.fade_max:
                    tau = t + grid[None, :]
                    c[active] = _fade(old[active, None], p[active, None], start[active, None],
                                      length[active, None], tau).mean(axis=1)
                else:  # a step: the exact share of the interval before and after it
                    s = start[active] - t
                    c[active] = s * old[active] + (1.0 - s) * p[active]
            yield c * self.records_per_interval

    def state(self, cost: np.ndarray) -> np.ndarray:
        return cost * self.state_per_record


def _fade(old: np.ndarray, new: np.ndarray, start: np.ndarray, length: np.ndarray, tau) -> np.ndarray:
    """The rate at ``tau`` of a linear cross-fade from ``old`` to ``new`` over [start, start + length]."""
    done = np.clip((tau - start) / np.where(length > 0, length, 1.0), 0.0, 1.0)
    done = np.where(length > 0, done, (tau >= start) * 1.0)
    return old + (new - old) * done


@dataclass
class BurstWorkload:
    """A Zipf(z) background plus heavy-tailed bursts that rise, hold and decay at irregular times.

    Units: a burst's peak is in *mean worker loads* (``records_per_interval / num_workers``), drawn
    as ``peak_min * (1 + Pareto(tail))`` and capped at ``peak_max``. Bursts arrive as a Poisson
    process (``bursts_per_interval``) on uniformly drawn keys; each ramps up linearly over
    U(0, ``rise_max``) intervals, holds for Exp(``hold_mean``) intervals, then decays with a
    half-life drawn log-uniformly in ``half_life``. An interval's expected count is the rate
    averaged over ``substeps`` points of the interval; ``sampled`` draws Poisson counts around it.

    Why peaks stop at one mean worker load (``peak_max = 1``): a key heavier than a worker's share
    cannot be balanced by any planner that keeps keys whole; such bursts would set max/mean for
    every policy alike and hide what a forecast changes. With ``tail = 1.2`` about one burst in
    seven still peaks above half a worker's load.
    """

    num_keys: int = 10_000
    z: float = 0.8
    num_workers: int = 20
    seed: int = 1
    records_per_interval: float = 1e6
    bursts_per_interval: float = 1.5
    peak_min: float = 0.1
    tail: float = 1.2
    peak_max: float = 1.0
    rise_max: float = 2.0
    hold_mean: float = 2.0
    half_life: tuple[float, float] = (0.25, 4.0)
    substeps: int = 16
    sampled: bool = True
    state_per_record: float = 1.0
    keys: list[bytes] = field(init=False, repr=False)
    hash_raw: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.keys, self.hash_raw = _keys(self.num_keys)

    @property
    def name(self) -> str:
        return f"bursts(z={self.z},K={self.num_keys},rate={self.bursts_per_interval},tail={self.tail})"

    def intervals(self, count: int) -> Iterator[np.ndarray]:
        rng = np.random.default_rng(self.seed)
        base = np.empty(self.num_keys)
        base[rng.permutation(self.num_keys)] = zipf_probabilities(self.num_keys, self.z)
        base *= self.records_per_interval
        unit = self.records_per_interval / self.num_workers
        lo, hi = np.log(self.half_life[0]), np.log(self.half_life[1])
        # active bursts: key, start, rise, hold, half-life, peak (records per interval)
        bursts = np.empty((0, 6))
        grid = (np.arange(self.substeps) + 0.5) / self.substeps
        for t in range(count):
            n = rng.poisson(self.bursts_per_interval)
            if n:
                new = np.column_stack([
                    rng.integers(0, self.num_keys, n),
                    t + rng.random(n),
                    rng.random(n) * self.rise_max,
                    rng.exponential(self.hold_mean, n),
                    np.exp(rng.uniform(lo, hi, n)),
                    unit * np.minimum(self.peak_min * (1.0 + rng.pareto(self.tail, n)), self.peak_max),
                ])
                bursts = np.vstack([bursts, new])
            cost = base.copy()
            if len(bursts):
                rate = burst_rates(bursts[:, 1:], t + grid)
                np.add.at(cost, bursts[:, 0].astype(np.int64), rate.mean(axis=1))
                # forget bursts decayed below 2**-12 of their peak by the end of this interval
                ended = bursts[:, 1] + bursts[:, 2] + bursts[:, 3] + 12.0 * bursts[:, 4] < t + 1
                bursts = bursts[~ended]
            yield rng.poisson(cost).astype(np.float64) if self.sampled else cost

    def state(self, cost: np.ndarray) -> np.ndarray:
        return cost * self.state_per_record


def burst_rates(shape: np.ndarray, times: np.ndarray) -> np.ndarray:
    """Rate of each burst (rows: start, rise, hold, half-life, peak) at each of ``times``.

    Zero before the start, a linear ramp to the peak over ``rise``, the peak for ``hold``, then
    ``peak * 2 ** (-elapsed / half_life)``.
    """
    start, rise, hold, half, peak = (shape[:, i : i + 1] for i in range(5))
    x = times[None, :] - start
    ramp = np.where(rise > 0, np.clip(x / np.where(rise > 0, rise, 1.0), 0.0, 1.0), (x >= 0) * 1.0)
    decay = np.exp2(-np.maximum(x - rise - hold, 0.0) / half)
    return np.where(x < 0, 0.0, peak * ramp * decay)
