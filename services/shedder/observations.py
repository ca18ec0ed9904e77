"""From the measured lags of the stages to the policy's view of each declared stream (pure).

The policy (:mod:`services.shedder.policy`) wants, per input stream, one time lag, its trend, the
offered arrival rate and the kept records still waiting, plus one processing rate shared by every
stream. The service measures groups on partitions; this module is the mapping, written down once:

* **Lag of a stream** = the routers' time lag on the stream's topic (its worst partition) + the
  reduce's time lag on the routed topic (the worst job, worst partition). A record that is
  neither routed nor reduced waits for both stages; the sum is the end-to-end wait of a record at
  both heads, an upper bound of the oldest record's age (the max of the two is a lower bound).
  A lag not known (a group with no position yet) counts 0.
* **Trend**: the lag's change since the last cycle, ``rising`` or ``falling`` beyond
  ``tolerance_s``, else ``flat`` (a micro-batch's saw-tooth is within it when the tolerance is a
  trigger interval or so).
* **Arrival**: the records per second appended to the stream's topic (before shedding).
* **Backlog** (kept records waiting): the routers' offset lag on the topic times the keep in force
  (those records will be read and shed at that keep) plus the reduce's offset lag shared among the
  streams in proportion to their kept arrival rates (the routed topic mixes them).
* **Processing rate**: with a reduce job known, the slowest job's consumption of the routed topic
  (kept records: the reduce is downstream of the shedding); without one, the routers' consumption of
  each topic times its keep (the routers read every record; only the kept ones are work downstream).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from services.shedder.config import StreamDeclaration
from services.shedder.policy import Observation, Trend
from services.shedder.tracker import GroupLag


@dataclass(frozen=True)
class StreamView:
    """The figures behind one stream's observation (for the log and the metrics)."""

    topic: str
    router_lag_s: float
    reduce_lag_s: float
    lag_s: float
    trend: Trend


def _known(x: float) -> float:
    return 0.0 if math.isnan(x) else x


def trend_of(lag_s: float, previous: float | None, tolerance_s: float) -> Trend:
    """``rising`` / ``falling`` when the lag moved more than ``tolerance_s`` since ``previous``."""
    if previous is None:
        return Trend.FLAT
    if lag_s - previous > tolerance_s:
        return Trend.RISING
    if previous - lag_s > tolerance_s:
        return Trend.FALLING
    return Trend.FLAT


def observe_streams(
    streams: Sequence[StreamDeclaration],
    router: GroupLag | None,
    reduces: Sequence[GroupLag],
    keeps: Mapping[str, float],
    previous_lags: Mapping[str, float],
    tolerance_s: float,
) -> tuple[dict[str, Observation], float, dict[str, StreamView]]:
    """Each stream's :class:`Observation`, the shared processing rate, and the figures behind them."""
    reduce_lag = max((_known(g.lag_seconds()) for g in reduces), default=0.0)
    reduce_backlog = max((g.lag_records() for g in reduces), default=0)
    arrivals = {s.topic: router.arrival_rate(s.topic) if router else 0.0 for s in streams}
    kept = {t: a * keeps.get(t, 1.0) for t, a in arrivals.items()}
    kept_total = sum(kept.values())
    observations, views = {}, {}
    for s in streams:
        keep = keeps.get(s.topic, 1.0)
        router_lag = _known(router.lag_seconds(s.topic)) if router else 0.0
        lag = router_lag + reduce_lag
        trend = trend_of(lag, previous_lags.get(s.topic), tolerance_s)
        share = kept[s.topic] / kept_total if kept_total > 0 else 1.0 / len(streams)
        backlog = (router.lag_records(s.topic) if router else 0) * keep + reduce_backlog * share
        observations[s.topic] = Observation(keep, lag, trend, arrivals[s.topic], backlog)
        views[s.topic] = StreamView(s.topic, router_lag, reduce_lag, lag, trend)
    if reduces:
        service = min(g.service_rate() for g in reduces)
    elif router is not None:
        service = sum(router.service_rate(s.topic) * keeps.get(s.topic, 1.0) for s in streams)
    else:
        service = 0.0
    return observations, service, views
