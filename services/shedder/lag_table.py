"""Offset lag to time lag, per partition: a bounded table of when the log's end reached each offset.

Why time and not records: a lag of 10,000 records is a second on a busy partition and an hour on a
quiet one; a latency target is in seconds. The time lag of a consumer is the age of the oldest record
it has not processed: ``now - append_time(committed)``, the record *at* the committed offset being
the next one it reads. Reading that record's timestamp would cost a fetch per partition per poll;
instead, like kafka-lag-exporter (``LookupTable.scala``), each partition keeps a table of
``(log-end offset, time)`` points sampled by the caller, and the append time of an offset is read off
that table.

**The lookup** (:meth:`LagTable.append_time`). The end offset is the *next* offset to be written, so
the record at offset ``o`` was appended when the end first passed ``o``, i.e. reached ``o + 1``: the
first point with an end offset ``>= o + 1`` and the one before it bracket that moment, and the time
is interpolated linearly between them. kafka-lag-exporter interpolates at ``o`` itself; at ``o + 1``
the last record before a point is given that point's time, and an estimate never comes before the
moment the end was last seen below the record. Outside the table:

* ``o`` at or past the newest end offset: the consumer has read everything known to exist, lag 0
  (kafka-lag-exporter's ``LagIsZero``, extended to an offset read after the end was sampled: lag is
  never negative).
* ``o`` older than the oldest point: extrapolated backwards "given the largest trendline we have
  available", as kafka-lag-exporter does: the line through the oldest and the newest point,
  ``t = t_r - (o_r - x) * (t_r - t_l) / (o_r - o_l)``. One change: a *trailing* plateau (the producer
  has stopped) is left out of that line, i.e. the right point is the first one at the newest end
  offset, because a producer that stopped an hour ago says nothing about the rate at which the records
  before the table were written. With no rate known at all (one point, or one flat line) the record
  is known only to be older than the oldest point: the result is that point's time, a lower bound on
  the lag (``Kind.AT_LEAST``), where kafka-lag-exporter gives no estimate (``TooFewPoints``).
* ``o`` below the log's start (``log_start``, when the caller knows it): retention deleted the
  record; the consumer's next record is the first one left, so the lag is measured to that.

**A stalled producer** adds no new end offsets: the table's newest points form a plateau, compressed
to its first and last point (kafka-lag-exporter's "flat line" rule: a third point at the same offset
moves the last one). The append time of a record before the plateau does not change, so the time lag
of a consumer that has stalled too keeps growing with the wall time, as it should; one that has read
up to the plateau has lag 0.

**Bounded, accurate over long lags.** kafka-lag-exporter keeps the newest N points, so a lag longer
than N poll intervals is extrapolated, and wrong as soon as the rate changed before the table's
start. Here the table keeps at most ``capacity`` points and, when full, drops the interior point whose
removal changes the table the least *relative to that point's age*: the time error its removal makes
at its own offset (where the two piecewise-linear curves differ most), divided by how long ago it was
taken. A lag is estimated with an error relative to its size, so old points can be far apart while
recent ones stay dense; points on a straight line (a steady rate) go first and the knees of a rate
change stay. The oldest point is never dropped, so the table always spans the whole history it has
seen, and the newest is the reference of every lag.

**Clocks.** The table takes times from its caller and never reads a clock. Feed it a monotonic clock
(``time.monotonic()``) and compute ``now`` from the same clock: a wall-clock step would otherwise
look like a burst of lag (forward) or stop the table (backward). A point whose time is not after the
newest point's is ignored (``OUT_OF_ORDER``, as kafka-lag-exporter does), so a step backwards can only
delay new points, never corrupt old ones.

**A log that went back** (an end offset below the newest point's: the topic was deleted and
recreated, or truncated by an unclean leader election) describes another log: the old points would
give every new record a wrong time, so the table restarts from the new point (``RESET``), where
kafka-lag-exporter ignores such points forever (``NonMonotonic``). **Compaction** removes records
but not offsets: end offsets still rise one per record written, so the table is unaffected; a
committed offset on a compacted-away record is read as the next record, written a moment later.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from dataclasses import dataclass
from enum import StrEnum

DEFAULT_CAPACITY = 64


@dataclass(frozen=True)
class Point:
    """The log-end offset (the next offset to be written) seen at ``time`` (caller's clock, seconds)."""

    offset: int
    time: float


class Added(StrEnum):
    """What :meth:`LagTable.add` did with a point."""

    INSERTED = "inserted"
    UPDATED = "updated"  # a plateau's last point moved to the new time
    OUT_OF_ORDER = "out-of-order"  # not after the newest point: ignored
    INVALID = "invalid"  # a negative offset (Kafka's "none") or a time that is not finite: ignored
    RESET = "reset"  # the end offset went back: the table restarted from this point


class Kind(StrEnum):
    """How an append time (and so a time lag) was obtained."""

    CAUGHT_UP = "caught-up"  # at or past the newest end offset: lag 0
    INTERPOLATED = "interpolated"  # between two points of the table
    EXTRAPOLATED = "extrapolated"  # before the oldest point, along the table's rate
    AT_LEAST = "at-least"  # before the oldest point, no rate known: that point's time, a bound
    UNKNOWN = "unknown"  # empty table


@dataclass(frozen=True)
class Estimate:
    """The estimated append time of a record (``None`` when caught up or unknown) and how it was got."""

    kind: Kind
    time: float | None = None


@dataclass(frozen=True)
class TimeLag:
    """A consumer's lag on one partition: in seconds (NaN: unknown) and in records, and how it was got."""

    seconds: float
    records: int
    kind: Kind


class LagTable:
    """One partition's ``(end offset, time)`` points; see the module docstring for every rule."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        if capacity < 3:
            raise ValueError(f"capacity must be >= 3 (oldest, newest and one to thin), got {capacity}")
        self.capacity = capacity
        self._offsets: list[int] = []
        self._times: list[float] = []

    def __len__(self) -> int:
        return len(self._offsets)

    @property
    def points(self) -> list[Point]:
        return [Point(o, t) for o, t in zip(self._offsets, self._times, strict=True)]

    @property
    def newest(self) -> Point | None:
        return Point(self._offsets[-1], self._times[-1]) if self._offsets else None

    def add(self, end_offset: int, time: float) -> Added:
        """Record that the partition's end offset was ``end_offset`` at ``time``."""
        offsets, times = self._offsets, self._times
        if end_offset < 0 or not math.isfinite(time):
            return Added.INVALID
        if offsets:
            if time <= times[-1]:
                return Added.OUT_OF_ORDER
            if end_offset < offsets[-1]:
                offsets.clear()
                times.clear()
                offsets.append(end_offset)
                times.append(time)
                return Added.RESET
            if len(offsets) >= 2 and offsets[-2] == offsets[-1] == end_offset:
                times[-1] = time
                return Added.UPDATED
        offsets.append(end_offset)
        times.append(time)
        if len(offsets) > self.capacity:
            self._thin()
        return Added.INSERTED

    def _thin(self) -> None:
        """Drop the interior point whose removal costs the least time error relative to its age."""
        offsets, times = self._offsets, self._times
        now = times[-1]
        best, best_cost = 1, math.inf
        for i in range(1, len(offsets) - 1):
            cost = _removal_error(offsets, times, i) / (now - times[i])
            if cost < best_cost:  # ties: the oldest goes first
                best, best_cost = i, cost
        del offsets[best]
        del times[best]

    def append_time(self, offset: int) -> Estimate:
        """When the record at ``offset`` was appended (the end offset first reached ``offset + 1``)."""
        offsets, times = self._offsets, self._times
        if not offsets:
            return Estimate(Kind.UNKNOWN)
        if offset >= offsets[-1]:
            return Estimate(Kind.CAUGHT_UP)
        target = offset + 1
        i = bisect_left(offsets, target)  # the first point with an end offset >= target
        if i > 0:
            o_l, t_l, o_r, t_r = offsets[i - 1], times[i - 1], offsets[i], times[i]
            return Estimate(Kind.INTERPOLATED, t_r - (o_r - target) * (t_r - t_l) / (o_r - o_l))
        # before the table: the oldest point to the first point at the newest offset (a trailing
        # plateau says nothing about the rate before the table)
        r = bisect_left(offsets, offsets[-1])
        if r == 0:
            return Estimate(Kind.AT_LEAST, times[0])
        o_l, t_l, o_r, t_r = offsets[0], times[0], offsets[r], times[r]
        return Estimate(Kind.EXTRAPOLATED, t_r - (o_r - target) * (t_r - t_l) / (o_r - o_l))

    def time_lag(self, committed: int, now: float, log_start: int | None = None) -> TimeLag:
        """The lag of a consumer whose next record is ``committed``, read at ``now`` (the table's clock).

        ``log_start``: the partition's first offset still stored; a position before it is measured
        from there (retention deleted the records before it). In records, the lag is against the
        newest end offset the table holds, never negative.
        """
        newest = self.newest
        if newest is None or committed < 0:  # negative: Kafka's "no committed offset"
            return TimeLag(math.nan, 0, Kind.UNKNOWN)
        if log_start is not None and committed < log_start:
            committed = min(log_start, newest.offset)
        records = max(0, newest.offset - committed)
        estimate = self.append_time(committed)
        if estimate.time is None:
            return TimeLag(0.0 if estimate.kind is Kind.CAUGHT_UP else math.nan, records, estimate.kind)
        return TimeLag(max(0.0, now - estimate.time), records, estimate.kind)


def _removal_error(offsets: list[int], times: list[float], i: int) -> float:
    """The time error at offset ``offsets[i]`` if point ``i`` were dropped (its neighbours joined).

    The lookup uses a plateau's first point as a right end and its last as a left end; joining the
    neighbours gives, at the removed point's offset, the left neighbour's time when it shares that
    offset and the right neighbour's when that one does, which the line formula below yields too.
    """
    o_l, o, o_r = offsets[i - 1], offsets[i], offsets[i + 1]
    t_l, t, t_r = times[i - 1], times[i], times[i + 1]
    if o_r == o_l:  # the middle of a plateau: the lookup never uses it
        return 0.0
    return abs(t - (t_l + (o - o_l) * (t_r - t_l) / (o_r - o_l)))
