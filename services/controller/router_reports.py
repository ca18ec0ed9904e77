"""The routers' reports of one controller interval, with a late router's latest report standing in.

Why a stand-in: the controller's intervals run on its own clock and each router publishes on its
own, so under load (a busy host, a slow broker) a router's report can land one interval late. An
interval folded without it sees only the other routers' records: the workers fed by the silent
router look idle, the imbalance looks large, and the plan "levels" load that was never there. In
the controller e2e under a loaded CI machine, a plan that moves 7 keys when every router is seen
came out at 117 and 167 keys. A router that reported within the last ``grace`` intervals is
therefore still counted: its latest report stands in for the one still on its way. When the late
report arrives, the next interval holds it as well; :func:`~services.controller.interval_load.
router_weights` scales each router to one interval's worth, so two reports are not double load.

Why a bounded grace: a router that stopped for good (scaled down, its partitions taken over) must
stop counting, or its keys would be counted twice, once by it and once by its successor. Two
intervals cover a report one interval late; a router silent longer is gone as far as load goes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ballast.metrics.records import RouterKeyStats

Report = tuple[str, int, RouterKeyStats]  # (router, the report's span in ms, the report)


@dataclass
class RouterReports:
    """The interval's reports so far, and each router's latest report with its interval number."""

    grace: int = 2  # intervals a silent router's latest report still stands in (0: never)
    _current: list[Report] = field(default_factory=list)
    _latest: dict[str, tuple[int, Report]] = field(default_factory=dict)
    _interval: int = 0

    def add(self, router: str, span_ms: int, report: RouterKeyStats) -> None:
        self._current.append((router, span_ms, report))
        self._latest[router] = (self._interval, (router, span_ms, report))

    def end_interval(self) -> tuple[list[Report], list[str]]:
        """The interval's reports, stand-ins included, and the routers they stand in for; starts
        the next interval. An interval in which no router reported gets no stand-ins: nothing was
        flowing, or the controller lost the metrics topic, and either way there is nothing to plan."""
        reports, self._current = self._current, []
        this = self._interval
        self._interval += 1
        for router in [r for r, (at, _) in self._latest.items() if this - at > self.grace]:
            del self._latest[router]  # silent too long: gone as far as load goes
        if not reports:
            return [], []
        present = {router for router, _, _ in reports}
        late = sorted(r for r in self._latest if r not in present)
        return reports + [self._latest[r][1] for r in late], late
