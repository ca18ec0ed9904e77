"""Each group's newest lag measurement, from the shedder's ``LagSample``s: one cycle, never a mix.

Why one home: ``ballast lag`` and ``ballast status`` (and the demo's live view through it) both show
a group's lag from the samples on the metrics topic. The shedder samples all of a group's
partitions together, once per cycle. A partition whose newest sample is older than its group's
newest cycle has left what the shedder measures (a rebalance moved it, a topic lost it); counting
it would keep a lag long gone on screen, so only the newest cycle's samples count.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from ballast.metrics.records import LagSample, Metric

STATUS_ORDER = ("", "OK", "WARN", "STALL", "STOP", "ERR")  # Burrow's, worst last


@dataclass(frozen=True)
class GroupLag:
    """One group (a router group or a reduce job) as the shedder's newest cycle measured it."""

    stage: str
    group: str
    measured_ms: int  # the cycle's measuring time (the samples' interval end)
    source: str  # the shedder that measured it
    samples: tuple[LagSample, ...]  # by topic and partition

    @property
    def lag_seconds(self) -> float:
        """The largest partition's lag (NaN: none known)."""
        known = [s.lag_seconds for s in self.samples if not math.isnan(s.lag_seconds)]
        return max(known) if known else math.nan

    @property
    def status(self) -> str:
        """The worst status the cycle gave the group ("" when it gave none)."""
        given = (s.group_status or s.status for s in self.samples)
        return max(given, key=lambda x: STATUS_ORDER.index(x) if x in STATUS_ORDER else 0, default="")


class NewestLag:
    """Folds metrics (any kind; only ``LagSample``s count), newest per stage, group and partition."""

    def __init__(self) -> None:
        self._newest: dict[tuple[str, str, str, int], tuple[int, str, LagSample]] = {}

    def add(self, metrics: Iterable[Metric]) -> None:
        for m in metrics:
            s = m.body
            if not isinstance(s, LagSample):
                continue
            key = (s.stage, s.group, s.topic, s.partition)
            if key not in self._newest or m.interval_end >= self._newest[key][0]:
                self._newest[key] = (m.interval_end, m.source, s)

    def groups(self) -> list[GroupLag]:
        """Every group's newest cycle, routers first, then by stage and name."""
        by_group: dict[tuple[str, str], list[tuple[int, str, LagSample]]] = {}
        for (stage, group, _, _), found in self._newest.items():
            by_group.setdefault((stage, group), []).append(found)
        out = []
        for (stage, group), found in by_group.items():
            latest = max(at for at, _, _ in found)
            current = sorted((f for f in found if f[0] == latest), key=lambda f: (f[2].topic, f[2].partition))
            out.append(GroupLag(stage, group, latest, current[0][1], tuple(s for _, _, s in current)))
        return sorted(out, key=lambda g: (g.stage != "router", g.stage, g.group))
