"""Forecasts that were tried and not kept, run on the same loop so the comparison can be repeated.

``--variants`` adds them as policies beside ``last`` and ``forecast`` (under the every-interval
trigger only). docs/controller.md reports what they gave; the module docstring of
:mod:`ballast.planner.forecast` says why the kept rule is the one it is.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ballast.planner.forecast import ForecastSettings
from bench.controller.loop import Forecast, Guesser


class Ewma:
    """Exponentially smoothed level, no trend: ``level = a * y + (1 - a) * level``."""

    def __init__(self, alpha: float) -> None:
        self.alpha = alpha
        self.level: np.ndarray | None = None

    def observe(self, c: np.ndarray) -> None:
        self.level = c.copy() if self.level is None else self.alpha * c + (1 - self.alpha) * self.level

    def guess(self) -> np.ndarray:
        assert self.level is not None
        return self.level


class Holt:
    """Holt's linear method with damping: level and trend smoothed, forecast ``level + phi * trend``."""

    def __init__(self, alpha: float, beta: float, phi: float) -> None:
        self.alpha, self.beta, self.phi = alpha, beta, phi
        self.level: np.ndarray | None = None
        self.trend: np.ndarray | None = None

    def observe(self, c: np.ndarray) -> None:
        if self.level is None or self.trend is None:
            self.level, self.trend = c.copy(), np.zeros_like(c)
            return
        before = self.level
        self.level = self.alpha * c + (1 - self.alpha) * (before + self.phi * self.trend)
        self.trend = self.beta * (self.level - before) + (1 - self.beta) * self.phi * self.trend

    def guess(self) -> np.ndarray:
        assert self.level is not None and self.trend is not None
        return np.maximum(self.level + self.phi * self.trend, 0.0)


VARIANTS: dict[str, tuple[str, Callable[[], Guesser]]] = {
    "ewma-0.5": ("smoothed level, alpha 0.5, no trend", lambda: Ewma(0.5)),
    "holt-0.5": ("Holt, alpha 0.5, beta 0.5, phi 0.8", lambda: Holt(0.5, 0.5, 0.8)),
    "linear": ("y + d always (Holt with alpha = beta = 1), no cap, not calibrated",
               lambda: Forecast(ForecastSettings(fresh=float("inf"), cap_at_heaviest=False,
                                                 calibrate=False))),
    "follow-2": ("the kept rule with follow 2", lambda: Forecast(ForecastSettings(follow=2.0))),
    "no-cap": ("the kept rule without the cap at the heaviest key",
               lambda: Forecast(ForecastSettings(cap_at_heaviest=False))),
    "uncalibrated": ("the kept rule without following changes measured to revert",
                     lambda: Forecast(ForecastSettings(calibrate=False))),
}
