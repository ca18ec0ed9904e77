"""How long each fault took to recover from: the time from its end until the pipeline's lag is back
under the shedder's target. Pure: the shedder's lag samples and the faults in, figures out.

The lag is what ``ballast lag`` and the shedder read: the ``LagSample``s on the metrics topic, the
largest partition's per stage (router, reduce), each measurement summed with the other stage's
newest (the wait of a record at both heads: what the target bounds). A fault *ends* when its effect does (the
restarted service said it is ready, the stopped one was continued, every broker answers again, the
skewed producer finished, the junk was written). Its recovery is the first sample at or after the
end under the target; ``None`` when the lag never got back under it before the run ended. The lag
when it was injected says whether the pipeline was under target then (a fault that hits during the
burst, or during another fault, is measured all the same, and reads accordingly).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def pipeline_lag(samples: Sequence[tuple[int, str, float]]) -> list[tuple[int, float, float]]:
    """(measured at ms, router lag, reduce lag) at each measurement of either stage, the other
    stage's newest beside it (the shedder measures the stages at their own moments)."""
    by: dict[int, dict[str, float]] = {}
    for at, stage, v in samples:
        by.setdefault(at, {})[stage] = v
    newest: dict[str, float] = {}
    out = []
    for at, stages in sorted(by.items()):
        newest.update(stages)
        if "router" in newest and "reduce" in newest:
            out.append((at, newest["router"], newest["reduce"]))
    return out


def recovery(
    fault: dict[str, Any], lag: Sequence[tuple[int, float, float]], target_s: float
) -> dict[str, Any]:
    """The fault's recovery figures (``fault``: injected_at and ended_at in ms, 0 when it never was)."""
    injected, ended = int(fault.get("injected_at") or 0), int(fault.get("ended_at") or 0)
    if not injected or not ended:
        return {"recovery_s": None, "lag_at_injection_s": None, "peak_lag_s": None, "recovered": False}
    before = [r + d for at, r, d in lag if at <= injected]
    back = next((at for at, r, d in lag if at >= ended and r + d < target_s), None)
    window = [r + d for at, r, d in lag if injected <= at <= (back if back is not None else at)]
    return {
        "recovery_s": None if back is None else round((back - ended) / 1000, 1),
        "lag_at_injection_s": round(before[-1], 2) if before else None,
        "peak_lag_s": round(max(window), 2) if window else None,
        "recovered": back is not None,
    }
