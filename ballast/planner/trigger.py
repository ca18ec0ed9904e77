"""When to rebalance: realized imbalance above ``1 + theta`` for K intervals in a row, with a gap.

Why on *realized* imbalance: the loads the routing in force actually produced are the only thing
the controller knows for sure; a forecast says where keys should go, not whether moving any is
worth its state transfer.

Why these three settings, and why their defaults do not flap:

* ``theta`` (0.15) sits *above* the planner's own tolerance (0.08 in ``ballast controller plan``):
  a plan leaves max/mean at or below 1.08, so a load has to drift by 0.07 before the trigger even
  starts counting. A trigger at the planner's tolerance would re-plan every load the planner had
  just called good enough the moment noise pushed it a hair higher.
* ``consecutive`` (K = 2): one noisy interval above the threshold is not enough; a load that
  alternates above and below never fires, and one that sits at the threshold with noise fires at
  most once per gap instead of every other interval.
* ``min_gap`` (3 intervals): a rebalance's own effect (keys moving, state in flight) has to show in
  the statistics before the next decision; also a hard bound of one rebalance per ``min_gap``
  intervals whatever the load does.

"Above" is strict (with a 1e-9 tolerance for rounding): a load exactly at ``1 + theta`` is at the
threshold, not over it. The streak restarts after a rebalance, because the intervals before it were
measured under the old routing. A non-finite ratio (no load measured) counts as not above.

Pure: :func:`observe` takes the trigger's state and one interval's max/mean and returns the
decision and the next state; the caller keeps the state. It lives in the library, beside the
planners, because the controller service and the simulator benchmark (``bench/controller``, which
imports no service) both run it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

TOLERANCE = 1e-9


@dataclass(frozen=True)
class TriggerSettings:
    """The rebalance trigger's settings (see the module docstring for the defaults)."""

    theta: float = 0.15
    consecutive: int = 2
    min_gap: int = 3

    def __post_init__(self) -> None:
        if self.theta < 0:
            raise ValueError(f"theta must be >= 0, got {self.theta}")
        if self.consecutive < 1:
            raise ValueError(f"consecutive must be >= 1, got {self.consecutive}")
        if self.min_gap < 1:
            raise ValueError(f"min_gap must be >= 1 (1: a rebalance every interval), got {self.min_gap}")


@dataclass(frozen=True)
class TriggerState:
    """``above``: intervals in a row above the threshold; ``since``: intervals since the last
    rebalance (``None``: none yet)."""

    above: int = 0
    since: int | None = None


@dataclass(frozen=True)
class Decision:
    """Whether to rebalance after this interval, why (for the log), and the state to keep."""

    rebalance: bool
    reason: str
    state: TriggerState


def observe(
    state: TriggerState, ratio: float, settings: TriggerSettings = TriggerSettings(), *, busy: bool = False
) -> Decision:
    """One interval's realized ``max/mean`` through the trigger.

    ``busy``: the caller cannot rebalance now (a migration is still in flight). A trigger that
    would fire then holds instead: nothing was rebalanced, so the streak and the gap go on
    counting and it fires at the first interval the caller can act on, if the load is still above.
    Firing and resetting as if it had rebalanced would leave a lasting imbalance alone for
    ``consecutive`` more intervals (and ``min_gap``) after the migration ends."""
    limit = 1.0 + settings.theta
    is_above = math.isfinite(ratio) and ratio > limit + TOLERANCE
    above = state.above + 1 if is_above else 0
    since = None if state.since is None else state.since + 1
    if not is_above:
        return Decision(False, f"max/mean {ratio:.3f} within {limit:.3f}", TriggerState(0, since))
    if above < settings.consecutive:
        return Decision(
            False,
            f"max/mean {ratio:.3f} above {limit:.3f} for {above} of {settings.consecutive} intervals",
            TriggerState(above, since),
        )
    if since is not None and since < settings.min_gap:
        return Decision(
            False,
            f"max/mean {ratio:.3f} above {limit:.3f} for {above} intervals, but only {since} of "
            f"{settings.min_gap} intervals since the last rebalance",
            TriggerState(above, since),
        )
    if busy:
        return Decision(
            False,
            f"max/mean {ratio:.3f} above {limit:.3f} for {above} intervals, but a migration is in flight",
            TriggerState(above, since),
        )
    return Decision(
        True, f"max/mean {ratio:.3f} above {limit:.3f} for {above} intervals", TriggerState(0, 0)
    )
