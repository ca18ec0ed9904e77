"""The campaign's verdicts and acceptance from run reports made by hand."""

from __future__ import annotations

from typing import Any

import pytest

from bench.chaos.report import run_ok, summary, verdicts

pytestmark = pytest.mark.unit


def run(seed: int = 1, **results: Any) -> dict[str, Any]:
    r = {
        "records": 1000,
        "records_lost": 0,
        "rows_wrong": 0,
        "false_exact": 0,
        "late_records": 0,
        "lost_detail": {},
        "wrong_detail": {},
        "exact_windows": 10,
        "unjudged_windows": 0,
        "unjudged_records": 0,
        "coverage": {"with_interval": 100, "count_with_row": 0.97},
    }
    r.update(results)
    faults = [{"kind": "kill-router", "phase": "ended", "recovery_s": 3.0}]
    out = {"seed": seed, "results": r, "faults": faults, "closed": True, "unexpected_exits": []}
    out["verdicts"] = verdicts(out)
    return out


def test_a_clean_run_passes_every_verdict_and_the_acceptance() -> None:
    good = run()
    assert run_ok(good["verdicts"])
    assert summary([good])["acceptance"]["ok"]


@pytest.mark.parametrize(
    ("results", "verdict"),
    [
        ({"records_lost": 1}, "records_lost"),
        ({"rows_wrong": 2}, "rows_wrong"),
        ({"false_exact": 1}, "false_exact"),
        ({"unjudged_records": 5, "unjudged_windows": 1}, "windows_closed"),
    ],
)
def test_loss_wrong_rows_and_unaccounted_records_fail_the_run_and_the_acceptance(results, verdict) -> None:
    bad = run(**results)
    assert not bad["verdicts"][verdict]["ok"]
    s = summary([run(), bad])
    assert not s["acceptance"]["ok"] and s["acceptance"]["clean_runs"] == "1 of 2"


def test_late_records_and_poor_coverage_fail_the_run_not_the_acceptance() -> None:
    late = run(late_records=3)
    assert not late["verdicts"]["late"]["ok"] and not run_ok(late["verdicts"])
    assert summary([late])["acceptance"]["ok"]
    poor = run(coverage={"with_interval": 100, "count_with_row": 0.8})
    assert not poor["verdicts"]["coverage"]["ok"]
    few = run(coverage={"with_interval": 10, "count_with_row": 0.5})
    assert few["verdicts"]["coverage"]["ok"]  # too few shed windows to judge


def test_a_fault_without_a_recovery_time_fails_the_acceptance() -> None:
    r = run()
    r["faults"][0]["recovery_s"] = None
    assert not summary([r])["acceptance"]["ok"]
