"""DS2's decisions over time: warm-up after an action, activation over several evaluations, a
scale-down delay, and the rules that keep it from flapping or fighting the shedder.

The thesis leaves how activation aggregates its history open ("maximum or median"), and its code
acts on the latest estimate. Ours, decided and tested:

* **Scale up** a stage when its last ``activation`` estimates all ask for more than it has, to the
  lower median of them: one spiky window neither triggers nor sizes it, and DS2's
  no-overshoot property (under linear scaling an estimate never exceeds the need) makes the
  median safe. Any scale-up applies, even +1.
* **Scale down** a stage only when every estimate over ``scale_down_delay_s`` asks for a real drop,
  to the **maximum** of them (Flink's autoscaler's rule after its users' flapping reports): a
  count just revisited is not left again within the delay. A real drop is ``scale_down_min_drop``
  (2, DS2's code) or at least ``scale_down_min_fraction`` (a quarter) of the count: DS2's "ignore
  changes by one" was for tens of instances, and would keep 2 routers for a load 1 carries forever.
* **Warm-up**: ``warmup`` evaluations after any action are ignored (rates measured while state
  moves and JVMs warm are not the new configuration's).
* **Never while the shedder sheds** for a scale-down (the load it hides is real), and a
  scale-down history is cleared by shedding or by a scale-up of the stage.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from services.controller.scaling.ds2 import Estimate


@dataclass(frozen=True)
class DecisionSettings:
    warmup: int = 2  # evaluations ignored after an action
    activation: int = 3  # consecutive estimates that must agree before a scale-up
    scale_down_delay_s: float = 600.0
    scale_down_min_drop: int = 2
    scale_down_min_fraction: float = 0.25

    def __post_init__(self) -> None:
        if (
            self.warmup < 0
            or self.activation < 1
            or self.scale_down_delay_s < 0
            or self.scale_down_min_drop < 1
        ):
            raise ValueError(f"invalid scaling settings: {self}")


UP = "UP"
DOWN = "DOWN"


@dataclass(frozen=True)
class StageDecision:
    """One stage's change, with the estimates it was decided from (oldest first): a replay of the
    control log recomputes ``after`` from them (:func:`decided_count`)."""

    stage: str
    before: int
    after: int
    reason: str
    rule: str = UP
    estimates: tuple[int, ...] = ()


def decided_count(rule: str, estimates: tuple[int, ...] | list[int]) -> int:
    """The count a decision takes from its estimates: the lower median for a scale-up, the
    maximum for a scale-down (see the module docstring for why)."""
    if not estimates:
        raise ValueError("a decision needs at least one estimate")
    if rule == UP:
        return sorted(estimates)[(len(estimates) - 1) // 2]
    if rule == DOWN:
        return max(estimates)
    raise ValueError(f"unknown scaling rule {rule!r}")


@dataclass
class _History:
    ups: deque = field(default_factory=deque)  # the last `activation` optimal counts
    downs: list[tuple[float, int]] = field(default_factory=list)  # (time, optimal) while all ask less


class Decider:
    """Feeds on one :func:`~services.controller.scaling.ds2.optimal_instances` result per
    evaluation; says which stages to rescale. Pure: the caller applies and logs."""

    def __init__(self, settings: DecisionSettings, counts: dict[str, int]) -> None:
        self.settings = settings
        self.counts = dict(counts)
        self._history: dict[str, _History] = {s: _History(deque(maxlen=settings.activation)) for s in counts}
        self._warming = 0

    def evaluate(
        self, now_s: float, estimates: dict[str, Estimate], shedding: bool = False
    ) -> list[StageDecision]:
        if self._warming > 0:
            self._warming -= 1
            return []
        decisions = []
        for stage, estimate in estimates.items():
            self.counts.setdefault(stage, estimate.current)
            decision = self._stage(stage, now_s, estimate.optimal, shedding)
            if decision is not None:
                decisions.append(decision)
        if decisions:
            self._warming = self.settings.warmup
            for d in decisions:
                self.counts[d.stage] = d.after
                self._history[d.stage] = _History(deque(maxlen=self.settings.activation))
        return decisions

    def _stage(self, stage: str, now_s: float, optimal: int, shedding: bool) -> StageDecision | None:
        current = self.counts[stage]
        h = self._history.setdefault(stage, _History(deque(maxlen=self.settings.activation)))
        h.ups.append(optimal)
        if optimal > current:
            h.downs.clear()
            if len(h.ups) == self.settings.activation and min(h.ups) > current:
                window = tuple(h.ups)
                after = decided_count(UP, window)
                why = f"{len(window)} estimates above {current}: {list(window)}, lower median {after}"
                return StageDecision(stage, current, after, why, UP, window)
            return None
        drop = current - optimal
        real = (
            drop >= self.settings.scale_down_min_drop
            or drop >= self.settings.scale_down_min_fraction * current
        )
        if shedding or drop <= 0 or not real:
            h.downs.clear()
            return None
        h.downs.append((now_s, optimal))
        if now_s - h.downs[0][0] >= self.settings.scale_down_delay_s:
            window = tuple(o for _t, o in h.downs)
            after = decided_count(DOWN, window)
            span = now_s - h.downs[0][0]
            why = f"{len(window)} estimates over {span:.0f} s well below {current}, max {after}"
            return StageDecision(stage, current, after, why, DOWN, window)
        return None
