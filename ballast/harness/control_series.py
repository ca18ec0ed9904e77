"""The keep-probability in force over time, from the control log; when the routers applied it.

Why in the harness: the shedding benchmark and the demo both draw it and judge results by it.

Pure: the events are the control log's (``ControlLogReader``'s dicts: epoch, issued_at, type,
payload), the marker samples the benchmark's own readings of the lowest epoch every routed
partition has announced (:meth:`ballast.harness.routed.MarkerWatch.poll`). The setting in force for
a topic follows the one rule the router and the reduce share (:func:`ballast.control.state.keep_for`:
the topic's own setting, else ``*``, else 1.0).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ballast.control.state import keep_for


def keep_series(events: Iterable[Mapping[str, Any]], topic: str) -> list[dict[str, Any]]:
    """One point per ``SHEDDING`` event that changed ``topic``'s keep-probability: when it was
    issued, its epoch, the keep in force from then on, and who asked (the event's reason)."""
    settings: dict[str, float] = {}
    out: list[dict[str, Any]] = []
    current = 1.0
    for e in events:
        if e["type"] != "SHEDDING":
            continue
        body = e["payload"][1]
        settings[str(body["target"])] = float(body["keep_probability"])
        keep = keep_for(settings, topic)
        if keep != current:
            current = keep
            out.append({"at_ms": int(e["issued_at"]), "epoch": int(e["epoch"]), "keep": keep,
                        "reason": str(body.get("reason", ""))[:200]})  # fmt: skip
    return out


def applied_at(epoch: int, marker_samples: Sequence[tuple[int, int]]) -> int | None:
    """When every routed partition had announced ``epoch`` (the first sample at or past it), ms."""
    return next((at for at, lowest in marker_samples if lowest >= epoch), None)


def keep_at(series: Sequence[Mapping[str, Any]], at_ms: int) -> float:
    """The keep in force at ``at_ms`` (1.0 before the first setting)."""
    keep = 1.0
    for point in series:
        if point["at_ms"] > at_ms:
            break
        keep = float(point["keep"])
    return keep
