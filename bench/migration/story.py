"""A migration's story, as the control log tells it: START, its steps, STATE_SENT, DONE or ABORT.

Why from the log and not from the controller's own lines: the log is the record everyone reads
(``ballast control log``), its events carry the controller's time of issue (``issued_at``), and a
migration is bracketed there by ``MIGRATION_STEP`` events with every step a ``ROUTING_UPDATE``
carrying the migration id (docs/controller.md). Pure: events in, a dict out.
"""

from __future__ import annotations

from typing import Any


def migration_story(events: list[dict[str, Any]], after_epoch: int = 0) -> dict[str, Any] | None:
    """The first migration that starts after ``after_epoch``: its bracket and steps; None when no
    START is in ``events``. ``end_phase`` is "" while it is still in flight."""
    start = next(
        (
            e
            for e in events
            if e["epoch"] > after_epoch
            and e["type"] == "MIGRATION_STEP"
            and e["payload"][1]["phase"] == "START"
        ),
        None,
    )
    if start is None:
        return None
    body = start["payload"][1]
    mid = body["migration_id"]
    story: dict[str, Any] = {
        "migration_id": mid,
        "keys": len(body["keys"]),
        "start_epoch": int(start["epoch"]),
        "start_ms": int(start["issued_at"]),
        "end_phase": "",
        "end_epoch": None,
        "end_ms": None,
        "steps": [],
        "state_sent": 0,
        "moves": [
            {"key": k, "from": int(f), "to": int(t)}
            for k, f, t in zip(body["keys"], body["from_workers"], body["to_workers"], strict=True)
        ],
    }
    for e in events:
        if e["epoch"] <= start["epoch"]:
            continue
        payload = e["payload"][1]
        if e["type"] == "ROUTING_UPDATE" and payload.get("migration_id") == mid:
            story["steps"].append(
                {
                    "index": len(story["steps"]),
                    "epoch": int(e["epoch"]),
                    "at_ms": int(e["issued_at"]),
                    "assign": len(payload.get("assign", {})),
                    "unassign": len(payload.get("unassign", [])),
                    "keys": [*payload.get("assign", {}), *payload.get("unassign", [])],
                }
            )
        elif e["type"] == "MIGRATION_STEP" and payload["migration_id"] == mid:
            if payload["phase"] == "STATE_SENT":
                story["state_sent"] += 1
            elif payload["phase"] in ("DONE", "ABORT"):
                story.update(
                    end_phase=payload["phase"], end_epoch=int(e["epoch"]), end_ms=int(e["issued_at"])
                )
                story["not_installed"] = len(payload["keys"]) if payload["phase"] == "ABORT" else 0
                break
    return story


def step_epochs(story: dict[str, Any]) -> dict[str, int]:
    """Each moved key's step epoch: the epoch its state chunk is installed for."""
    return {k: s["epoch"] for s in story["steps"] for k in s["keys"]}
