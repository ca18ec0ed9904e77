"""The controller's interval loop on the simulator: a plan made after interval t, judged by t+1.

Timeline of interval t, for one policy:

1. the workload gives interval t's per-key records ``c(t)``; the routing in force (decided after
   t-1) places them: *realized* loads, and their max/mean;
2. the key state held (``M_k``, the window memory of the state model) takes interval t in;
3. the trigger (:mod:`ballast.planner.trigger`) sees the realized max/mean of t;
4. if it fires, the policy gives the planner its guess of interval t+1 and the planner (Mixed,
   as in ``ballast controller plan``) plans against the routing in force; the moved keys' ``M_k``
   is the state moved, and the new routing is in force for t+1.

Policies (what the planner is given):

* ``hash``: nothing, never plans (plain Kafka placement);
* ``last``: interval t itself, "plan on the last interval" (the paper's planners);
* ``forecast``: :class:`ballast.planner.forecast.LoadForecaster`'s forecast of t+1;
* ``oracle``: interval t+1 itself, which no controller can know: the bound on what any
  forecast could reach with this planner and trigger.

Pure numpy and deterministic: no wall-clock enters the figures.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from ballast.planner.forecast import ForecastSettings, LoadForecaster
from ballast.planner.mixed import MixedPlanner
from ballast.planner.stats import KeyStats, WindowMemory
from ballast.planner.trigger import TriggerSettings, TriggerState, observe

POLICIES = ("hash", "last", "forecast", "oracle")


@dataclass(frozen=True)
class LoopConfig:
    """The planner's settings (as ``ballast controller plan`` uses them), the trigger and the state window."""

    num_workers: int = 20
    theta: float = 0.08
    a_max: int = 3000
    beta: float = 1.5
    window: int = 1
    trigger: TriggerSettings = field(default_factory=TriggerSettings)
    forecast: ForecastSettings = field(default_factory=ForecastSettings)


@dataclass
class LoopRun:
    """Per-interval series of one policy over one workload trace."""

    policy: str
    realized: np.ndarray  # max/mean of interval t under the routing in force
    rebalanced: np.ndarray  # a plan was made after interval t
    keys_moved: np.ndarray
    state_moved: np.ndarray  # sum of M_k over the keys moved after interval t
    state_held: np.ndarray  # sum of M_k over all keys after interval t
    guess_error: np.ndarray  # sum |guess of t+1 - c(t+1)| / sum c(t+1): what the planner was given

    def summary(self, warmup: int) -> dict[str, float]:
        """Figures over the intervals from ``warmup`` on (the first plan moves keys off the hash)."""
        r = self.realized[warmup:]
        held = np.maximum(self.state_held[warmup:], 1e-300)
        err = self.guess_error[warmup:]
        err = err[np.isfinite(err)]
        return {
            "realized_mean": float(r.mean()),
            "realized_p95": float(np.percentile(r, 95)),
            "realized_max": float(r.max()),
            "state_moved_pct": 100.0 * float(np.mean(self.state_moved[warmup:] / held)),
            "state_moved_per_interval": float(self.state_moved[warmup:].mean()),
            "keys_moved_per_interval": float(self.keys_moved[warmup:].mean()),
            "rebalances": int(self.rebalanced[warmup:].sum()),
            "intervals": int(r.size),
            "guess_error": float(err.mean()) if err.size else float("nan"),
        }


class LastInterval:
    """"Plan on the last interval": the guess of t+1 is t."""

    def observe(self, c: np.ndarray) -> None:
        self.c = c

    def guess(self) -> np.ndarray:
        return self.c


class Forecast:
    """The controller's forecast (:class:`LoadForecaster`) over the dense key range."""

    def __init__(self, settings: ForecastSettings) -> None:
        self.forecaster = LoadForecaster(settings)
        self.keys: range | None = None

    def observe(self, c: np.ndarray) -> None:
        self.keys = self.keys or range(len(c))  # one immutable sequence: no per-key lookups
        self.forecaster.observe(self.keys, c)

    def guess(self) -> np.ndarray:
        assert self.keys is not None
        return self.forecaster.predict(self.keys)


class Guesser(Protocol):
    def observe(self, c: np.ndarray) -> None: ...

    def guess(self) -> np.ndarray: ...


def run_loop(
    costs: np.ndarray,
    home: np.ndarray,
    hash_raw: np.ndarray,
    policy: str,
    config: LoopConfig,
    state_per_record: float = 1.0,
    guesser: Guesser | None = None,
) -> LoopRun:
    """One policy over the trace ``costs`` (intervals x keys): the realized loads and the moves.

    ``guesser`` replaces the policy's own guess of the next interval (for forecasts under study);
    ``policy`` is then only its name.
    """
    if guesser is None:
        if policy not in POLICIES:
            raise ValueError(f"unknown policy {policy!r}; choose from {POLICIES}")
        guesser = Forecast(config.forecast) if policy == "forecast" else LastInterval()
    intervals, k = costs.shape
    nw = config.num_workers
    ids = np.arange(k)
    assign = home.astype(np.int32).copy()
    window = WindowMemory(k, config.window)
    planner = MixedPlanner(theta_max=config.theta, a_max=config.a_max, beta=config.beta)
    trigger = TriggerState()
    out = {n: np.zeros(intervals) for n in ("real", "keys", "moved", "held")}
    err = np.full(intervals, np.nan)
    rebalanced = np.zeros(intervals, dtype=bool)
    for t in range(intervals):
        c = costs[t]
        loads = np.bincount(assign, weights=c, minlength=nw)
        mean = loads.mean()
        out["real"][t] = loads.max() / mean if mean > 0 else 1.0
        mem = window.push(c * state_per_record)
        out["held"][t] = mem.sum()
        if policy == "hash":
            continue
        if t + 1 == intervals:
            break  # nothing left to plan for
        nxt = costs[t + 1]
        guesser.observe(c)
        guess = nxt if policy == "oracle" else guesser.guess()
        if nxt.sum() > 0:
            err[t] = float(np.abs(guess - nxt).sum() / nxt.sum())
        decision = observe(trigger, out["real"][t], config.trigger)
        trigger = decision.state
        if not decision.rebalance:
            continue
        stats = KeyStats(ids, guess, mem, home, nw, hash_raw=hash_raw)
        new = planner.plan(stats, assign).assign
        moved = new != assign
        rebalanced[t] = True
        out["keys"][t] = moved.sum()
        out["moved"][t] = mem[moved].sum()
        assign = new
    return LoopRun(policy, out["real"], rebalanced, out["keys"], out["moved"], out["held"], err)
