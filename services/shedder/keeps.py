"""The keep-probabilities in force, as the control log says, and the request id of a change (pure).

Why the log and not memory: the controller orders every ``SHEDDING`` setting into the control log,
and the routers apply what the log says. A shedder that decided from its own memory of what it
sent would, after a crash, decide against settings that never reached the log, or send one that
already did. So each cycle starts from the log's fold, and a decision that equals the setting in
force is no change (the policy sends only :attr:`~services.shedder.policy.Decision.changes`).

Why request ids derived from the decision, not random: faust's ``exactly_once`` does not make a
send to another topic transactional, so the shedder runs at-least-once and makes its one effect,
the request, idempotent. The id of "set ``topic`` to ``keep``" is
``<shedder id>:<topic>@<basis>-><keep>``, where the *basis* is the epoch of the log event that put
the topic's setting in force (its last ``SHEDDING`` event, one for ``*``, or the snapshot the fold
started from). A request sent and not yet applied when the shedder died leaves the log as it was;
the restarted shedder folds the same basis, and if it decides the same keep it derives the same
id, which the controller answers from its memory (``duplicate``) instead of applying it twice.
Once a setting is applied the basis moves on, so a later change to the same value (shed, lifted,
shed again) gets a new id and is not mistaken for a resend.

One gap, written down: if the controller appended a snapshot between the crash and the restart,
and the restarted fold starts at that snapshot while the request is still queued, the basis
differs; the queued request and the new one are then both applied, the second a no-op setting the
same value (the controller writes snapshots every 1,000 epochs, and answers a queued request within
a pass).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

WILDCARD = "*"


def request_id(shedder_id: str, topic: str, basis: int, keep: float) -> str:
    """The id of the request setting ``topic`` to ``keep`` on top of the setting put by epoch ``basis``."""
    return f"{shedder_id}:{topic}@{basis}->{keep:.3f}"


class KeepsInForce:
    """Folds control events into each target's keep-probability and the epoch that set it."""

    def __init__(self, base_epoch: int = 0, keeps: Mapping[str, float] | None = None) -> None:
        self.base_epoch = base_epoch
        self.keeps: dict[str, float] = dict(keeps or {})
        self.basis: dict[str, int] = {}
        # issued_at (ms) and epoch of the last scaling action: a SCALE, or an applied SCALING decision
        self.scaled_at_ms = 0
        self.scaled_epoch = 0

    def apply(self, events: Iterable[Mapping[str, Any]]) -> None:
        """Control log events in epoch order, as :class:`~ballast.control.log.ControlLogReader` folds them."""
        for e in events:
            epoch = int(e["epoch"])
            body = e["payload"][1]
            if e["type"] == "SHEDDING":
                target = str(body["target"])
                self.keeps[target] = float(body["keep_probability"])
                self.basis[target] = epoch
            elif e["type"] == "SCALE" or (e["type"] == "SCALING" and body["mode"] == "APPLIED"):
                self.scaled_at_ms = max(self.scaled_at_ms, int(e["issued_at"]))
                self.scaled_epoch = epoch
            elif e["type"] == "TABLE_SNAPSHOT":
                self.keeps = {k: float(p) for k, p in body.get("keep_probability", {}).items()}
                self.basis = {}
                self.base_epoch = epoch

    def keep_for(self, topic: str) -> float:
        """Its own setting, else ``*``'s, else 1 (as the routers read it)."""
        return self.keeps.get(topic, self.keeps.get(WILDCARD, 1.0))

    def basis_for(self, topic: str) -> int:
        """The epoch after which the topic's keep-probability last changed (either setting can)."""
        return max(self.basis.get(topic, self.base_epoch), self.basis.get(WILDCARD, self.base_epoch))

    def warming_up(self, now_ms: int, hold_s: float) -> bool:
        """A scaling action was taken less than ``hold_s`` ago: rates measured now are the
        reconfiguration's (state moving, workers restarting), and a shed decision from them would
        answer a dip that the new capacity is about to end."""
        return self.scaled_at_ms > 0 and now_ms - self.scaled_at_ms < hold_s * 1000
