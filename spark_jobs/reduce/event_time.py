"""A worker's event time: it advances with the slowest input partition, not the fastest record.

Why not Spark's watermark: Spark keeps one per query, the highest event time it has read minus
the delay. A router that stalls, lags behind its input, or reads a backlog holds records far
behind that maximum, and every one of them became ``late`` (a 7 s stall with 30 s of event-time
progress elsewhere dropped 5 % of an input from its windows), and one record from a clock an
hour ahead made every record after it ``too-late``. Flink and Kafka Streams follow each input
partition instead; so does this.

**Progress per input partition.** The router that owns input partition p writes, in its markers
(into every routed partition), the highest event time of p's records it has read (routed or shed;
the records it refuses as ``future`` do not count). Every record of p before such a marker in a
routed partition has an event time at or below it, so a worker's view of p is the highest value
announced in its own partition. Its watermark is ``min over the job's input partitions of that
progress − delay``, never lower than before: a record of p is ``late`` only if it is more than the
delay behind what p itself had shown.

**Idle partitions.** A partition that announces no progress (no input, a dead router not yet
replaced, a stall) would hold every result back. One whose progress has not advanced for
``idle_ms`` of *routed-log time* is left out of the minimum (``idle_ms = 0``: never). If every
partition is idle the watermark holds. Routed-log time is the highest Kafka timestamp of this
routed partition's records read so far, not the worker's clock: a reduce that restarts or reads a
backlog in capped pieces must not find partitions idle because it has not read their markers yet,
and a replayed batch must decide the same. What the timeout trades: a router stalled for longer
than it has its partitions' records fall behind the watermark (``late``) when it comes back;
shorter stalls only delay results.

**Routers of an older version** (``legacy``: markers that cannot carry progress) are followed by
their data records as they reach this worker, each clamped to its routed record's timestamp plus
``max_future_ms``: the old rule, per partition.

State (kept in the worker's meta, so it is checkpointed with the batch): the log time, and per
partition its progress, the log time it last advanced (or was first seen; -1: not yet) and whether
it is legacy (:class:`~spark_jobs.reduce.worker_meta.ClockState`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from spark_jobs.reduce.worker_meta import ClockState, PartitionClock

UNKNOWN = -1


class EventClock:
    """Per input partition progress, the idle rule and the watermark (module docstring)."""

    def __init__(
        self, partitions: Iterable[str], state: ClockState | None, delay_ms: int, idle_ms: int
    ) -> None:
        state = state if state is not None else ClockState()
        self.delay_ms = int(delay_ms)
        self.idle_ms = int(idle_ms)
        self.log_ms = int(state.log_ms)
        saved = state.parts
        self.parts: dict[str, list[Any]] = {}  # pid -> [progress, advanced at, legacy] (mutated in place)
        for pid in partitions:
            self.join(pid)
            if pid in saved:
                self.parts[pid] = [saved[pid].progress, saved[pid].advanced_at, saved[pid].legacy]

    def join(self, pid: str) -> None:
        """A partition of the job (from the topics' metadata or named by a marker)."""
        self.parts.setdefault(pid, [UNKNOWN, UNKNOWN, False])

    def saw_log_time(self, log_ms: int) -> None:
        """A routed record of this worker's partition was appended at ``log_ms``."""
        self.log_ms = max(self.log_ms, int(log_ms))

    def announce(self, pid: str, event_ms: int, log_ms: int) -> None:
        """A marker's progress for ``pid`` (negative: the writer has read none of its records yet)."""
        part = self.parts.get(pid)
        if part is None:
            return  # not an input of this job (a router reading more topics covers them too)
        part[2] = False
        if event_ms > part[0]:
            part[0], part[1] = int(event_ms), int(log_ms)

    def announce_legacy(self, pid: str, event_ms: int, log_ms: int) -> None:
        """A data record of ``pid`` from a router whose markers carry no progress."""
        part = self.parts.get(pid)
        if part is None:
            return
        part[2] = True
        if event_ms > part[0]:
            part[0], part[1] = int(event_ms), int(log_ms)

    def mark_legacy(self, pid: str) -> None:
        part = self.parts.get(pid)
        if part is not None:
            part[2] = True

    def legacy(self) -> set[str]:
        return {pid for pid, part in self.parts.items() if part[2]}

    def idle(self) -> list[str]:
        """Partitions left out of the minimum now."""
        if self.idle_ms <= 0 or self.log_ms < 0:
            return []
        now, idle_ms = self.log_ms, self.idle_ms
        return [pid for pid, part in self.parts.items() if part[1] >= 0 and now - part[1] >= idle_ms]

    def watermark(self, previous: int) -> int:
        """The watermark after what was read: ``previous`` or higher."""
        if self.log_ms >= 0:
            for part in self.parts.values():
                if part[1] < 0:  # first seen now: its idle time counts from here
                    part[1] = self.log_ms
        idle = set(self.idle())
        active = [part[0] for pid, part in self.parts.items() if pid not in idle]
        if not active or min(active) < 0:
            return int(previous)
        return max(int(previous), min(active) - self.delay_ms)

    def state(self) -> ClockState:
        return ClockState(
            self.log_ms,
            {pid: PartitionClock(int(p[0]), int(p[1]), bool(p[2])) for pid, p in sorted(self.parts.items())},
        )

    def slowest(self) -> tuple[str, int] | None:
        """The active partition holding the watermark back, and its progress (stats)."""
        idle = set(self.idle())
        active = [(part[0], pid) for pid, part in self.parts.items() if pid not in idle]
        if not active:
            return None
        progress, pid = min(active)
        return pid, progress
