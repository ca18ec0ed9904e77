"""Arrival and service rates of a consumer group, per partition and summed, from offsets over time.

Why from offsets: the rate identity of a log needs no metric of the consumer's own. On a partition,
the log-end offset counts the records written and the committed offset the records consumed, so
``arrival = d(end)/dt`` and ``service = d(committed)/dt``, and their difference is how fast the lag
grows: ``d(lag)/dt = arrival - service``. Stream-Economics estimates the arrival rate the other way
round, ``consumed rate + d(lag)/dt``; with the end offsets sampled directly the identity holds by
construction. A group's rates are its partitions' rates summed (the rates of a topic's partitions
add; a skewed partition counts for what it carries).

Why smoothed over time and not over samples: samples come at uneven intervals (a timer that slips, a
reduce whose micro-batches are reported when they finish), and an EWMA with a fixed weight per sample
would forget faster when samples come faster. Here each interval's average rate ``r_i`` (offsets
advanced over the time taken) is folded in with the weight of the time it covers,
``rate += (1 - exp(-dt / tau)) * (r_i - rate)``: after a step change the estimate has moved
``1 - exp(-t / tau)`` of the way, however the time ``t`` was sampled. The first interval sets the
rate directly (no warm-up from zero).

Offsets that go back (a consumer rewound, a log recreated) make no interval: the next sample starts
a new one and the rate is kept. Samples at or before the previous one's time are ignored (feed a
monotonic clock, as for :mod:`services.shedder.lag_table`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

DEFAULT_TAU_S = 30.0


class RateMeter:
    """The smoothed rate (per second) at which a monotone counter, an offset, advances."""

    def __init__(self, tau_s: float = DEFAULT_TAU_S) -> None:
        if not tau_s > 0:
            raise ValueError(f"tau_s must be > 0, got {tau_s}")
        self.tau_s = tau_s
        self.rate: float | None = None  # None until two samples made an interval
        self._last: tuple[int, float] | None = None

    def update(self, value: int, time: float) -> float | None:
        """Fold the counter's ``value`` at ``time`` in; returns the smoothed rate."""
        last = self._last
        if value < 0 or not math.isfinite(time) or (last is not None and time <= last[1]):
            return self.rate  # Kafka's "no offset" (negative), a broken clock, or not after the last
        self._last = (value, time)
        if last is None or value < last[0]:
            return self.rate
        observed = (value - last[0]) / (time - last[1])
        if self.rate is None:
            self.rate = observed
        else:
            self.rate += (1.0 - math.exp(-(time - last[1]) / self.tau_s)) * (observed - self.rate)
        return self.rate


@dataclass
class PartitionRates:
    """One partition seen by one group: the log's arrival rate and the group's service rate."""

    tau_s: float = DEFAULT_TAU_S
    arrival_tau_s: float | None = None  # None: tau_s (see LagTracker for why they may differ)
    arrival: RateMeter = field(init=False)
    service: RateMeter = field(init=False)

    def __post_init__(self) -> None:
        self.arrival = RateMeter(self.arrival_tau_s or self.tau_s)
        self.service = RateMeter(self.tau_s)

    def update(self, time: float, end: int, committed: int | None) -> None:
        """One sample: the end offset and the group's position (``None``: the group has none yet)."""
        self.arrival.update(end, time)
        if committed is not None:
            self.service.update(committed, time)


@dataclass(frozen=True)
class Rates:
    """Records per second: written to the partitions (arrival) and consumed by the group (service)."""

    arrival: float
    service: float

    @property
    def growth(self) -> float:
        """How fast the lag in records grows (negative: it drains)."""
        return self.arrival - self.service


def group_rates(partitions: Iterable[PartitionRates]) -> Rates:
    """A group's rates: its partitions' summed (a partition with no rate yet adds nothing)."""
    arrival = service = 0.0
    for p in partitions:
        arrival += p.arrival.rate or 0.0
        service += p.service.rate or 0.0
    return Rates(arrival, service)


def drain_time_s(lag_records: int, rates: Rates) -> float:
    """Seconds until a backlog of ``lag_records`` is consumed at these rates (inf: it never drains)."""
    if lag_records <= 0:
        return 0.0
    return lag_records / -rates.growth if rates.growth < 0 else math.inf
