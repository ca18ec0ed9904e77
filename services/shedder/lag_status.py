"""A consumer's trend per partition and group, Burrow-style, from its time lag over a window.

Why a status and not a threshold: a lag of 30 s is fine for a consumer that is draining it and bad for
one that falls further behind each minute, and a consumer that has stopped is a different fault from
one that is slow. LinkedIn's Burrow (``core/internal/evaluator/caching.go``) judges a partition by the
shape of its last N commits, with no threshold; here the same rules judge the last N *evaluations*
(the shedder's samples of a partition: end offset, committed offset, time lag), with lag in seconds.

An :class:`Evaluation` is *behind* when its committed offset is below the end offset and its time
lag is above ``allowed_lag_s`` (Burrow's ``allowed-lag``, 0 by default; an unknown time lag counts as
behind). The window W is the last ``window`` evaluations with a known committed offset; ``cur`` is
the newest. The rules, first match wins:

1. **OK** when W is empty (no position known yet) or ``cur`` is not behind: a consumer that has
   caught up is never in trouble (Burrow checks nothing unless the current lag exceeds allowed-lag).
2. **ERR** when the committed offset went down between two evaluations of W and no later one of W got
   back to where it was (Burrow's REWIND, forgiving a rewind that recovered, e.g. a rebalance that
   re-committed an old offset), or when the log's end offset went down within W (the log was
   truncated or recreated; the lag table restarts, see :mod:`services.shedder.lag_table`).
3. **STOP** when the consumer has not reported for longer than ``stop_after_s`` and its oldest unread
   record has waited longer than that too. Reported means shown alive: ``cur.reported_at`` (a
   progress record received, a group member seen; the caller's knowledge), or, when the caller
   does not know (None), the last evaluation of the history at which the committed offset moved
   (the first one if it never moved, a lower bound; :class:`PartitionHistory` remembers it beyond
   the window). Burrow's rule is "no commit for longer than the window
   spans", unless the consumer had no lag recently; the second condition is that exception in time:
   a consumer silent because it had nothing to read has a lag no older than the record that arrived.
4. **OK** when some evaluation of W was not behind (Burrow's rule 1: lag zero somewhere in the window).
5. **OK** when W holds fewer than ``window`` evaluations: too little history for a trend (Burrow's
   incomplete partitions are OK too).
6. **STALL** when the committed offset is the same throughout W (behind all along, by rule 4): the
   consumer is there but does not advance.
7. **WARN** when the lag never went down between two consecutive evaluations of W and ended higher than
   it began (Burrow's "lag never decreases", with a rise required so that a constant lag is not a
   warning): the consumer advances but falls further behind. The lag compared is the time lag, or
   the lag in records when a time lag of W is unknown.
8. **OK** otherwise: behind, and catching up at least now and then.

A group's status is its worst partition's, in the order OK < WARN < STALL < STOP < ERR. Burrow caps a
group at ERR, folding STOP, STALL and REWIND into it; here a group keeps the five, since whether it
is stuck (STALL) or gone (STOP) is what its reader acts on.

Pick ``window`` × the sampling interval longer than the consumer's commit interval (a reduce's
micro-batch, a router's transaction), or a consumer between two commits looks stalled.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import IntEnum
from itertools import pairwise


class Status(IntEnum):
    """A partition's or group's status, in severity order (worst last)."""

    OK = 0
    WARN = 1
    STALL = 2
    STOP = 3
    ERR = 4

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class StatusRules:
    """The knobs of the rules: the window length, the lag that counts as none, the silence that is a stop."""

    window: int = 5
    allowed_lag_s: float = 0.0
    stop_after_s: float = 60.0

    def __post_init__(self) -> None:
        if self.window < 2:
            raise ValueError(f"window must be >= 2 evaluations, got {self.window}")
        if self.allowed_lag_s < 0:
            raise ValueError(f"allowed_lag_s must be >= 0, got {self.allowed_lag_s}")
        if not self.stop_after_s > 0:
            raise ValueError(f"stop_after_s must be > 0, got {self.stop_after_s}")


@dataclass(frozen=True)
class Evaluation:
    """One sample of one partition for one group (times on the shedder's monotonic clock, seconds)."""

    time: float
    end: int  # the log-end offset
    committed: int | None  # the group's position (the next record it reads); None: not known
    lag_seconds: float  # the time lag (NaN: not known)
    reported_at: float | None = None  # when the consumer last showed it is alive; None: not known

    @property
    def lag_records(self) -> int:
        return max(0, self.end - (self.committed or 0))


@dataclass(frozen=True)
class Verdict:
    """A status and the rule that gave it, in words (for logs and ``ballast lag``)."""

    status: Status
    reason: str


def behind(e: Evaluation, rules: StatusRules) -> bool:
    """The evaluation shows lag: records unread and a time lag above the allowed one (or unknown)."""
    if e.committed is None or e.committed >= e.end:
        return False
    return not e.lag_seconds <= rules.allowed_lag_s  # NaN: behind


def partition_status(history: Sequence[Evaluation], rules: StatusRules) -> Verdict:
    """The status of one partition from its evaluations, oldest first (the newest ``window`` are used)."""
    known = [e for e in history if e.committed is not None]
    w = known[-rules.window :]
    if not w:
        return Verdict(Status.OK, "no position known")
    cur = w[-1]
    if not behind(cur, rules):
        return Verdict(Status.OK, "caught up")
    rewind = _unrecovered_rewind(w)
    if rewind is not None:
        return Verdict(Status.ERR, f"committed offset went back from {rewind[0]} to {rewind[1]}")
    for a, b in pairwise(w):
        if b.end < a.end:
            return Verdict(Status.ERR, f"log end offset went back from {a.end} to {b.end}")
    silence = cur.time - _last_report(known)
    if silence > rules.stop_after_s and not cur.lag_seconds <= rules.stop_after_s:
        return Verdict(Status.STOP, f"no report for {silence:.0f} s, lag {cur.lag_seconds:.0f} s")
    if any(not behind(e, rules) for e in w):
        return Verdict(Status.OK, "lag was zero within the window")
    if len(w) < rules.window:
        return Verdict(Status.OK, f"{len(w)} of {rules.window} evaluations")
    if all(e.committed == cur.committed for e in w):
        return Verdict(Status.STALL, f"committed offset {cur.committed} unmoved over {len(w)} evaluations")
    lags = _trend(w)
    if all(b >= a for a, b in pairwise(lags)) and lags[-1] > lags[0]:
        return Verdict(Status.WARN, f"lag rose from {lags[0]:g} to {lags[-1]:g} and never fell")
    return Verdict(Status.OK, "catching up")


class PartitionHistory:
    """One partition's last ``window`` evaluations for one group, and when its offset last moved.

    Why remember the move: STOP needs the time since the consumer last showed it is alive, which for
    a group known only by its committed offsets is when that offset last moved, often longer ago
    than the window reaches. An evaluation without ``reported_at`` gets that time.
    """

    def __init__(self, rules: StatusRules) -> None:
        self.rules = rules
        self.evaluations: deque[Evaluation] = deque(maxlen=rules.window)
        self._committed: int | None = None
        self._moved_at: float | None = None

    def observe(self, e: Evaluation) -> Verdict:
        """Add an evaluation (newer than the last one) and judge the partition."""
        if e.committed is not None:
            if self._moved_at is None or e.committed != self._committed:
                self._committed, self._moved_at = e.committed, e.time
            if e.reported_at is None:
                e = replace(e, reported_at=self._moved_at)
        self.evaluations.append(e)
        return partition_status(self.evaluations, self.rules)


def group_status(partitions: Mapping[Hashable, Verdict]) -> tuple[Verdict, Hashable | None]:
    """A group's status: its worst partition's (and which partition that is; None: no partitions)."""
    if not partitions:
        return Verdict(Status.OK, "no partitions"), None
    worst = max(partitions, key=lambda p: partitions[p].status)
    return partitions[worst], worst


def _unrecovered_rewind(w: Sequence[Evaluation]) -> tuple[int, int] | None:
    """The first drop of the committed offset in ``w`` that no later evaluation recovered from."""
    for i in range(1, len(w)):
        before, after = w[i - 1].committed, w[i].committed
        assert before is not None and after is not None
        if after < before:
            if all(e.committed is not None and e.committed < before for e in w[i:]):
                return before, after
            return None  # Burrow looks at the first rewind only
    return None


def _last_report(known: Sequence[Evaluation]) -> float:
    """When the consumer was last seen alive: the caller's report time, or the last move of its offset."""
    reported = known[-1].reported_at
    if reported is not None:
        return reported
    moved = [b.time for a, b in pairwise(known) if b.committed != a.committed]
    return moved[-1] if moved else known[0].time


def _trend(w: Sequence[Evaluation]) -> list[float]:
    """The lags WARN compares: in seconds when all are known, in records otherwise."""
    if all(not math.isnan(e.lag_seconds) for e in w):
        return [e.lag_seconds for e in w]
    return [float(e.lag_records) for e in w]
