"""Scaling decisions as control events, and their replay: the log alone says how many instances
each stage has and why.

Why a decision carries its estimates: a decision is taken from several evaluations (activation,
the scale-down delay), most of which write nothing. Logging only "reduce 2 -> 4" would leave a
reader to trust it; with the estimates it was taken from and its rule, :func:`replay` recomputes
every count (:func:`~services.controller.scaling.decisions.decided_count`), checks that each
decision starts from the count the previous one left, and that an applied reduce decision is
followed by the ``SCALE`` that acts on it. Dry-run decisions are on record but change no count.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from services.controller.scaling.decisions import StageDecision, decided_count
from services.controller.scaling.ds2 import Estimate

APPLIED = "APPLIED"
DRY_RUN = "DRY_RUN"
REDUCE = "reduce"
ROUTER = "router"


def decision_event(
    decision: StageDecision,
    estimate: Estimate,
    *,
    policy: str = "ds2",
    applied: bool = True,
    inputs: Mapping[str, float] | None = None,
) -> tuple[str, dict[str, Any]]:
    """A ``SCALING`` event's type and body for ``decision``, with the last evaluation's ``estimate``."""
    extra = {"selectivity": float(estimate.selectivity), **{k: float(v) for k, v in (inputs or {}).items()}}
    return "SCALING", {
        "stage": decision.stage,
        "policy": policy,
        "mode": APPLIED if applied else DRY_RUN,
        "from_instances": int(decision.before),
        "to_instances": int(decision.after),
        "rule": decision.rule,
        "estimates": [int(e) for e in decision.estimates],
        "target_rate": float(estimate.target_rate),
        "true_rate_per_instance": estimate.true_rate_per_instance,
        "inputs": extra,
        "reason": decision.reason,
    }


class ReplayError(ValueError):
    """The log's decisions do not explain its counts (a decision not following from its estimates,
    a chain broken, a reduce decision without its SCALE)."""


@dataclass
class ScalingReplay:
    """What the log says: the count per stage after its last applied decision, and every decision."""

    counts: dict[str, int] = field(default_factory=dict)
    decisions: list[dict[str, Any]] = field(default_factory=list)  # (epoch added) in log order
    dry_runs: int = 0


def _body(event: Mapping[str, Any]) -> Mapping[str, Any]:
    payload = event["payload"]
    return payload[1] if isinstance(payload, tuple) else payload


def replay(events: Iterable[Mapping[str, Any]], initial: Mapping[str, int] | None = None) -> ScalingReplay:
    """Fold the ``SCALING`` events of ``events`` (decoded control events in log order), checking
    each one; ``initial``: the counts before the first (a stage missing starts at its first
    decision's ``from_instances``). Raises :class:`ReplayError` at the first that does not hold."""
    out = ScalingReplay(counts=dict(initial or {}))
    owed_scale: tuple[int, int] | None = None  # (epoch of the reduce decision, workers it promised)
    for event in events:
        etype = event["type"]
        epoch = int(event["epoch"])
        if owed_scale is not None:
            if etype != "SCALE" or int(_body(event)["num_workers"]) != owed_scale[1]:
                raise ReplayError(
                    f"epoch {owed_scale[0]}: applied reduce decision to {owed_scale[1]} workers is not "
                    f"followed by its SCALE (epoch {epoch} is {etype})"
                )
            owed_scale = None
            continue
        if etype != "SCALING":
            continue
        body = _body(event)
        stage = str(body["stage"])
        before, after = int(body["from_instances"]), int(body["to_instances"])
        estimates = [int(e) for e in body["estimates"]]
        try:
            recomputed = decided_count(str(body["rule"]), estimates)
        except ValueError as e:
            raise ReplayError(f"epoch {epoch}: {e}") from None
        if recomputed != after:
            raise ReplayError(
                f"epoch {epoch}: {stage} {body['rule']} from estimates {estimates} gives {recomputed}, "
                f"the event says {after}"
            )
        if (body["rule"] == "UP") != (after > before) or after == before:
            raise ReplayError(f"epoch {epoch}: rule {body['rule']} does not match {before} -> {after}")
        out.decisions.append({"epoch": epoch, **body})
        if body["mode"] != APPLIED:
            out.dry_runs += 1
            continue
        known = out.counts.get(stage)
        if known is not None and known != before:
            raise ReplayError(f"epoch {epoch}: {stage} decision starts from {before}, the log left {known}")
        out.counts[stage] = after
        if stage == REDUCE:
            owed_scale = (epoch, after)
    if owed_scale is not None:
        raise ReplayError(f"epoch {owed_scale[0]}: the log ends before the SCALE of its reduce decision")
    return out
