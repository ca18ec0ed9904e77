"""Every partition's lag table, rates and status history, fed with the service's samples.

Why one tracker for every group: the lag table is a fact of the *log* (its end offsets over time),
not of a group, so the routers' group and every reduce job reading the same partition look up the
same table; rates and status histories are per group and partition. Pure: no Kafka, no clock (the
service passes ``time.monotonic()`` readings, for the reasons in :mod:`services.shedder.lag_table`).

Why rates over intervals of at least ``rate_interval_s`` while lags are taken at every sample: a
committed offset moves in steps (a router's transaction, a reduce's micro-batch), so over an
interval shorter than a step it reads as a burst or a zero. The first interval sets the rate
directly (:class:`~services.shedder.rates.RateMeter`), so after a start a zero read there stayed in
the smoothed rate for several time constants: a restarted shedder planned with a capacity of 7/s
for a consumer doing 150/s.

Why the arrival rate may forget faster than the service rate (``arrival_tau_s``): log-end offsets
advance with every produced batch, a committed offset only with a transaction or a micro-batch.
The service rate needs the long time constant against those steps; the arrival rate does not,
and the policy plans with it: after an overload's end, a 10 s arrival rate still said 1,700/s
for 720/s one cycle later, which held a lift's goal at 0.8 and took a fourth cycle to lift.

A reduce job commits no offsets; its position on a routed partition is the ``end_offsets`` of its
latest ``ReduceProgress`` (-1: not known), and ``reported_at`` the time that progress arrived, so a
job that stopped reporting is STOP once its oldest unread record is old enough.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from services.shedder.lag_status import (
    Evaluation,
    PartitionHistory,
    Status,
    StatusRules,
    Verdict,
    group_status,
)
from services.shedder.lag_table import DEFAULT_CAPACITY, LagTable
from services.shedder.rates import DEFAULT_TAU_S, PartitionRates

TopicPartition = tuple[str, int]
ROUTER = "router"
REDUCE = "reduce"


@dataclass(frozen=True)
class PartitionLag:
    """One group's lag on one partition at one sample."""

    group: str
    stage: str
    topic: str
    partition: int
    committed: int | None  # the next record the group reads; None: not known
    end: int
    lag_records: int
    lag_seconds: float  # NaN: not known
    status: Status
    reason: str
    arrival_rate: float
    service_rate: float
    rated: bool = False  # both rates measured over an interval at least (else they read 0)


@dataclass(frozen=True)
class GroupLag:
    """One group's partitions at one sample, and the group's status (its worst partition's)."""

    group: str
    stage: str
    status: Status
    reason: str
    partitions: tuple[PartitionLag, ...]

    @property
    def rated(self) -> bool:
        """Every partition's rates are measured (a decision from rates read as 0 would be noise)."""
        return bool(self.partitions) and all(p.rated for p in self.partitions)

    def of_topic(self, topic: str | None = None) -> list[PartitionLag]:
        return [p for p in self.partitions if topic is None or p.topic == topic]

    def lag_seconds(self, topic: str | None = None) -> float:
        """The largest known time lag (of ``topic``'s partitions); NaN when none is known."""
        known = [p.lag_seconds for p in self.of_topic(topic) if not math.isnan(p.lag_seconds)]
        return max(known) if known else math.nan

    def lag_records(self, topic: str | None = None) -> int:
        return sum(p.lag_records for p in self.of_topic(topic))

    def arrival_rate(self, topic: str | None = None) -> float:
        return sum(p.arrival_rate for p in self.of_topic(topic))

    def service_rate(self, topic: str | None = None) -> float:
        return sum(p.service_rate for p in self.of_topic(topic))


class LagTracker:
    """Lag tables per partition, rates and status per (group, partition); see the module docstring."""

    def __init__(
        self,
        rules: StatusRules | None = None,
        table_capacity: int = DEFAULT_CAPACITY,
        tau_s: float = DEFAULT_TAU_S,
        rate_interval_s: float = 0.0,
        arrival_tau_s: float | None = None,
    ) -> None:
        self.rules = rules or StatusRules()
        self.table_capacity = table_capacity
        self.tau_s = tau_s
        self.arrival_tau_s = arrival_tau_s
        self.rate_interval_s = rate_interval_s
        self._rated_at: dict[tuple[str, TopicPartition], float] = {}
        self.tables: dict[TopicPartition, LagTable] = {}
        self._rates: dict[tuple[str, TopicPartition], PartitionRates] = {}
        self._histories: dict[tuple[str, TopicPartition], PartitionHistory] = {}
        self._ends: dict[TopicPartition, int] = {}
        self._log_starts: dict[TopicPartition, int] = {}

    def observe_ends(
        self,
        now: float,
        ends: Mapping[TopicPartition, int],
        log_starts: Mapping[TopicPartition, int] | None = None,
    ) -> None:
        """The log-end offsets read at ``now`` (read *after* the positions they are compared with)."""
        for tp, end in ends.items():
            table = self.tables.get(tp)
            if table is None:
                table = self.tables[tp] = LagTable(self.table_capacity)
            table.add(end, now)
            if end >= 0:
                self._ends[tp] = end
        self._log_starts.update({tp: s for tp, s in (log_starts or {}).items() if s >= 0})

    def observe_group(
        self,
        group: str,
        stage: str,
        now: float,
        positions: Mapping[TopicPartition, int | None],
        partitions: Iterable[TopicPartition] | None = None,
        reported_at: float | None = None,
    ) -> GroupLag:
        """The group's positions at ``now`` (``None`` or negative: none) judged against the tables.

        ``partitions``: the partitions the group should read (default: those in ``positions``); a
        partition without a position has an unknown lag and status OK (no position, no trend).
        """
        out = []
        for tp in sorted(set(partitions if partitions is not None else positions)):
            raw = positions.get(tp)
            committed = raw if raw is not None and raw >= 0 else None
            end = self._ends.get(tp)
            table = self.tables.get(tp)
            if end is None or table is None:
                continue  # no end offset read yet: nothing to measure against
            key = (group, tp)
            rates = self._rates.get(key)
            if rates is None:
                rates = self._rates[key] = PartitionRates(self.tau_s, self.arrival_tau_s)
                self._histories[key] = PartitionHistory(self.rules)
            if now - self._rated_at.get(key, -math.inf) >= self.rate_interval_s:
                rates.update(now, end, committed)
                self._rated_at[key] = now
            if committed is None:
                lag_s, lag_n = math.nan, 0
            else:
                lag = table.time_lag(committed, now, self._log_starts.get(tp))
                lag_s, lag_n = lag.seconds, lag.records
            verdict = self._histories[key].observe(Evaluation(now, end, committed, lag_s, reported_at))
            out.append(
                PartitionLag(
                    group,
                    stage,
                    tp[0],
                    tp[1],
                    committed,
                    end,
                    lag_n,
                    lag_s,
                    verdict.status,
                    verdict.reason,
                    rates.arrival.rate or 0.0,
                    rates.service.rate or 0.0,
                    rates.arrival.rate is not None and (committed is None or rates.service.rate is not None),
                )
            )
        worst, where = group_status({(p.topic, p.partition): Verdict(p.status, p.reason) for p in out})
        reason = worst.reason if where is None else f"{where[0]}[{where[1]}]: {worst.reason}"
        return GroupLag(group, stage, worst.status, reason, tuple(out))
