"""Which SHEDDING requests a cycle sends: each decision once, a refused one again after a backoff (pure).

Why a refused request is sent again: the id of a decision depends on the topic, the basis (the
epoch of the setting in force) and the keep only (:mod:`services.shedder.keeps`). While the log does
not move, every cycle decides the same change and derives the same id; a shedder that never sent an
id twice left a refused lift unasked for good, and the shed stayed in force (a lift refused as
``expired`` after a controller outage longer than its time to live).

Why under the same id, not a new one per attempt: the controller remembers only the ids its log
holds, never a refusal (:mod:`services.controller.sequencer`), so the same id sent again is judged
anew, and is still applied at most once. An attempt number in the id would break that across a
crash: a restarted shedder does not know which attempt was queued, and two ids for one decision
could both be applied.

Why a backoff: a refusal that is not transient (the fold refuses the setting) would otherwise be
sent every cycle. After the n-th refusal of a request, it is sent again when a cycle decides it
again, no sooner than ``2**(n-1)`` cycles after the cycle that read the refusal: the next cycle,
then 2, 4, … cycles later, at most :func:`max_wait_cycles`. Counted in cycles, not seconds, so a
timer's jitter cannot skip a cycle. A request sent and not answered yet is never sent again: it is
queued, and the controller answers it (possibly ``expired``) when it reads it.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass
from enum import StrEnum


class Send(StrEnum):
    FIRST = "first"
    AGAIN = "again"


@dataclass(frozen=True)
class Refusal:
    count: int  # refusals of this id so far
    due: int  # the first cycle that may send it again
    reason: str


def max_wait_cycles(resend_max_s: float, cycle_s: float) -> int:
    """The longest wait between two sends of a refused request, in whole cycles (at least 1)."""
    return max(1, math.ceil(resend_max_s / cycle_s - 1e-9))


class Outbox:
    """The ids sent, waiting for an answer, and refused (with when they may go again)."""

    def __init__(self, max_wait: int, remembered: int = 10_000) -> None:
        self.max_wait = max_wait
        self.remembered = remembered
        self.sent: set[str] = set()  # sent and not refused since: never sent again
        self.pending: set[str] = set()  # sent, not answered yet
        self.refused: OrderedDict[str, Refusal] = OrderedDict()

    def due(self, rid: str, cycle: int) -> Send | None:
        """Whether to send ``rid`` at ``cycle``: first, again, or not (queued, applied, backing off)."""
        if rid in self.sent:
            return None
        refusal = self.refused.get(rid)
        if refusal is None:
            return Send.FIRST
        return Send.AGAIN if cycle >= refusal.due else None

    def refusal(self, rid: str) -> Refusal | None:
        return self.refused.get(rid)

    def sending(self, rid: str) -> None:
        self.sent.add(rid)
        self.pending.add(rid)

    def answered(self, rid: str, accepted: bool, reason: str, cycle: int) -> None:
        """An answer read at ``cycle``; a refusal makes the id sendable again after its backoff."""
        self.pending.discard(rid)
        if accepted:
            self.refused.pop(rid, None)
            return
        self.sent.discard(rid)
        count = (self.refused[rid].count if rid in self.refused else 0) + 1
        wait = min(2 ** min(count - 1, 30), self.max_wait)
        self.refused[rid] = Refusal(count, cycle + wait, reason)
        self.refused.move_to_end(rid)
        while len(self.refused) > self.remembered:  # ids of bases long gone are never decided again
            self.refused.popitem(last=False)
