"""Per-key load forecast for the next interval: the last value, plus a fresh change once more.

A plan made from interval t-1 is judged by the load of t (docs/planners.md, decision 17), so the
planner should get its best guess of t, not a copy of t-1. The rule, per key, with ``y`` the last
interval's load, ``d = y(t-1) - y(t-2)`` its last change and ``d'`` the change before that::

    forecast = max(0, y + follow * d)   if the change is fresh: |d'| < fresh * |d|, or d' and d differ in sign
    forecast = y                        otherwise (the change was already under way: take it as done)
    forecast = min(forecast, max(y, heaviest y of the interval))   (no extrapolation past the heaviest key)

Why this rule, measured with ``make bench-controller`` (docs/controller.md has the tables). Figures
are mean realized max/mean on the hot-set swaps that fade in over up to an interval / on the
bursts, planning after every imbalanced interval, seeds 11-15 (the rule was chosen on seeds 1-6):
"plan on the last interval" gives 1.417 / 1.205, this rule 1.399 / 1.175, calibrated (below)
1.392 / 1.174.

* **No smoothing of the level.** The keys that decide the realized max are the ones changing; a
  smoothed level lags exactly those. An EWMA (alpha 0.5) gave 1.542 / 1.275 and Holt's method
  (alpha 0.5, beta 0.5, damped 0.8) 1.512 / 1.239: both *worse* than the last value alone.
* **A fresh change continues once (``follow = 1``).** A change that begins at a random instant of
  interval t-1 shows there, on average, half of itself, and all of it in t: adding the change once
  more is the unbiased completion. That is the headroom for keys still rising (and the decay for
  keys falling), and it is where the gain over the last interval comes from. ``follow = 2``
  balanced a little better on the report seeds (1.379 / 1.172) at 12-21 % more state moved; on the
  seeds the rule was chosen on it was no better (within 0.003), so 1 stays.
* **A change under way for two intervals is taken as done.** It was fresh last time and has been
  extrapolated once already; extrapolating it again overshoots a step that has just completed.
  Always extrapolating (``y + d``, Holt with alpha = beta = 1) came within 0.01 of this rule on
  every workload; this rule was ahead by about as much on the seeds it was chosen on.
* **No extrapolation past the heaviest key measured.** A forecast heavier than every key of the
  interval makes the planner isolate that key: empty a worker around it, a hundred small keys
  moved (and moved again an interval later, when the change is no longer fresh). The cap cut the
  keys moved per interval from 92.7 to 14.1 on the fading swaps (17.8 to 12.2 on the bursts) for
  0.009 / 0.001 of max/mean. A key measured heavier than that keeps its measured value, and the
  heaviest key itself is not extrapolated upwards.
* **Whether changes continue is measured, not assumed.** After each interval the forecaster compares
  what the rule extrapolated with what came: the continuation ``phi = sum(r * e) / sum(e * e)`` over
  the keys it extrapolated (``e`` the extrapolation, ``r`` the change that followed), with sums
  decayed by ``calibration_memory`` per interval. While ``phi < 0`` (fresh changes are measured to
  *revert*) the forecast is ``y + max(phi, -1) * e``; otherwise the rule above. Why: on the paper's
  hot-set swaps, which land on interval boundaries, a fresh change is complete when it is seen and a
  key that just turned hot is the likeliest to cool again (swaps draw it by frequency): phi settles
  near -0.1 and the plain rule lost to the last value (1.685 against 1.668, 13.3 keys moved per
  interval against 3.0), stale extrapolations paid for. Calibrated it is level with the last value
  (1.670, 3.8 keys moved): the totals of past intervals hold nothing that beats it there
  (docs/controller.md). Where changes continue (fades, instant swaps, bursts: phi 0.6 to 0.9) it
  stays out of the way; scaling ``follow`` by a positive phi was tried and lost, because headroom
  for a rising key is worth more to the realized max than a closer point estimate.
* **Keys that vanish decay.** Only heavy hitters are reported; a key missing from an interval is
  below the sketch's threshold, not at zero (and a key in the routing table must stay tracked), so
  its forecast is multiplied by ``vanish_decay`` per missing interval and it is forgotten once it
  falls below ``forget_below`` of the interval's total.
* **New keys** (after the first interval) are taken as rising from zero: a key enters the heavy
  hitters because it grew. In the very first interval nothing has a history, so nothing changes.

The rule is :func:`next_interval` (vectorised, pure); :class:`LoadForecaster` keeps the per-key
history across intervals for keys that come and go. Both live in the library, beside the planners
they feed, because the controller service and the simulator benchmark (``bench/controller``, which
imports no service) both run them.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ForecastSettings:
    """The forecast's settings (the module docstring says why these values). ``calibrate``: follow
    changes measured to revert; ``calibration_memory``: the weight of the past in that measure, per
    interval."""

    follow: float = 1.0
    fresh: float = 0.5
    cap_at_heaviest: bool = True
    vanish_decay: float = 0.5
    forget_below: float = 1e-6
    calibrate: bool = True
    calibration_memory: float = 0.7

    def __post_init__(self) -> None:
        if self.follow < 0:
            raise ValueError(f"follow must be >= 0, got {self.follow}")
        if self.fresh < 0:
            raise ValueError(f"fresh must be >= 0, got {self.fresh}")
        if not 0.0 <= self.vanish_decay <= 1.0:
            raise ValueError(f"vanish_decay must be in [0, 1], got {self.vanish_decay}")
        if self.forget_below < 0:
            raise ValueError(f"forget_below must be >= 0, got {self.forget_below}")
        if not 0.0 <= self.calibration_memory < 1.0:
            raise ValueError(f"calibration_memory must be in [0, 1), got {self.calibration_memory}")


def next_interval(
    last: np.ndarray, change: np.ndarray, previous_change: np.ndarray, settings: ForecastSettings
) -> np.ndarray:
    """The forecast of the next interval from the last value and the last two changes (vectorised,
    over every key tracked: the ceiling is the heaviest of them)."""
    last = np.asarray(last, dtype=np.float64)
    change = np.asarray(change, dtype=np.float64)
    previous_change = np.asarray(previous_change, dtype=np.float64)
    with np.errstate(invalid="ignore"):  # fresh = inf (always extrapolate) times a zero change
        fresh = (np.abs(previous_change) < settings.fresh * np.abs(change)) | (
            np.sign(previous_change) != np.sign(change)
        )
    out = np.maximum(last + np.where(fresh, settings.follow * change, 0.0), 0.0)
    if settings.cap_at_heaviest and last.size:
        out = np.minimum(out, np.maximum(last, last.max()))
    return out


class LoadForecaster:
    """The per-key history the forecast needs, over keys that come and go between intervals.

    Per key it keeps the last value (decayed while the key is missing), the last change and the
    change before it, and the rule's forecast made from them; across keys, the decayed sums that
    measure whether extrapolated changes continued (:attr:`continuation`). :meth:`observe` takes
    one interval; :meth:`forecast` gives the next.
    """

    def __init__(self, settings: ForecastSettings | None = None) -> None:
        self.settings = settings or ForecastSettings()
        self._keys: list[Hashable] = []
        self._index: dict[Hashable, int] = {}
        self._last = np.zeros(0)
        self._change = np.zeros(0)
        self._previous = np.zeros(0)
        self._rule = np.zeros(0)  # next_interval of the tracked keys, as of the last interval
        self._agree = 0.0  # decayed sum of (change that came) x (extrapolation made), over keys
        self._spread = 0.0  # decayed sum of extrapolation squared
        self._observed: Sequence[Hashable] | None = None
        self.intervals = 0

    def __len__(self) -> int:
        return len(self._keys)

    @property
    def keys(self) -> list[Hashable]:
        return list(self._keys)

    def observe(self, keys: Sequence[Hashable], loads: Sequence[float] | np.ndarray) -> None:
        """Fold one interval: ``loads[i]`` is the load of ``keys[i]``; keys not listed are missing."""
        loads = np.asarray(loads, dtype=np.float64)
        if loads.shape != (len(keys),):
            raise ValueError("one load per key")
        if len(set(keys)) != len(keys):
            raise ValueError("a key is listed twice")
        if loads.size and (not np.all(np.isfinite(loads)) or loads.min() < 0):
            raise ValueError("loads must be finite and non-negative")
        same = isinstance(keys, tuple | range) and keys is self._observed and len(keys) == len(self._keys)
        if same:  # the same immutable key sequence as last time, nothing missing: no lookups
            known = np.arange(len(keys))
        else:
            known = np.fromiter((self._index.get(k, -1) for k in keys), dtype=np.int64, count=len(keys))
        is_known = known >= 0
        seen = np.zeros(len(self._keys), dtype=bool)
        seen[known[is_known]] = True

        # Observed keys: the new value, its change, and the change before it.
        if self.intervals == 0:
            before = loads  # nothing has a history yet: no change anywhere
        else:
            before = np.zeros(len(keys))  # a key new since then rose from nothing
            before[is_known] = self._last[known[is_known]]
        change = loads - before
        previous = np.zeros(len(keys))
        previous[is_known] = self._change[known[is_known]]
        if self.intervals:  # did the extrapolations made after the last interval continue?
            made = self._rule[known[is_known]] - self._last[known[is_known]]
            memory = self.settings.calibration_memory
            self._agree = memory * self._agree + float(change[is_known] @ made)
            self._spread = memory * self._spread + float(made @ made)

        # Missing keys: decayed, with no change (and none before); forgotten below the threshold.
        missing = np.flatnonzero(~seen)
        decayed = self._last[missing] * self.settings.vanish_decay
        keep = decayed >= self.settings.forget_below * float(loads.sum())
        missing, decayed = missing[keep], decayed[keep]

        if missing.size or not same:
            self._keys = list(keys) + [self._keys[i] for i in missing]
            self._index = {k: i for i, k in enumerate(self._keys)}
        self._observed = keys
        self._last = np.concatenate([loads, decayed])
        self._change = np.concatenate([change, np.zeros(missing.size)])
        self._previous = np.concatenate([previous, np.zeros(missing.size)])
        self._rule = next_interval(self._last, self._change, self._previous, self.settings)
        self.intervals += 1

    @property
    def continuation(self) -> float | None:
        """How much of an extrapolated change came in the interval after it, measured (1: all of
        it, 0: none, negative: it reverted); None before any extrapolation could be judged."""
        return self._agree / self._spread if self._spread > 0 else None

    def forecast(self) -> tuple[list[Hashable], np.ndarray]:
        """Every tracked key (observed or still decaying) and its forecast for the next interval."""
        phi = self.continuation
        if self.settings.calibrate and phi is not None and phi < 0:  # changes revert: follow that
            return self.keys, np.maximum(self._last + max(phi, -1.0) * (self._rule - self._last), 0.0)
        return self.keys, self._rule

    def predict(self, keys: Sequence[Hashable]) -> np.ndarray:
        """The forecast for ``keys`` (0 for a key never seen or already forgotten)."""
        _, values = self.forecast()
        idx = np.fromiter((self._index.get(k, -1) for k in keys), dtype=np.int64, count=len(keys))
        out = np.zeros(len(keys))
        out[idx >= 0] = values[idx[idx >= 0]]
        return out
