"""The short fault campaign (``make chaos ARGS="--seeds 1 --short"``), end to end: one seed, one of
each fault, on three brokers, the whole pipeline as services, every output row and dead letter
judged against the campaign's own record of what it produced (docs/chaos.md).

It runs the campaign as a user does (``python -m bench.chaos``) and reads its report. What it
asserts is what must hold whatever the timing: no record lost, no row wrong, no false exact row,
no late record, every fault injected and ended with its recovery time reported, every window
closed, no service exiting on its own, the skewed producer's records and the junk dead-lettered,
the shed windows' intervals holding the offered count at the stated rate, and nothing left
running. How long recoveries took is the report's figure, not an assertion.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench.chaos.plan import KINDS

SEED = 1


def _processes_naming(folder: str) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if folder.encode() in (proc / "cmdline").read_bytes():
                    found.append(int(proc.name))
            except OSError:
                continue
    return found


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    work = tmp_path_factory.mktemp("chaos")
    out = work / "chaos.json"
    argv = [
        sys.executable,
        "-m",
        "bench.chaos",
        "--seeds",
        "1",
        "--first-seed",
        str(SEED),
        "--short",
        "--out",
        str(out),
        "--workdir",
        str(work),
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=850, check=False)
    assert out.exists(), f"no report; exit {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    report = json.loads(out.read_text())
    report["exit_code"], report["stdout"] = done.returncode, done.stdout
    return report


def _run(report: dict[str, Any]) -> dict[str, Any]:
    (run,) = report["runs"]
    assert "results" in run, run.get("error")
    return run


def test_every_fault_was_injected_and_ended_and_its_recovery_reported(campaign) -> None:
    run = _run(campaign)
    faults = run["faults"]
    assert sorted(f["kind"] for f in faults) == sorted(KINDS)
    assert all(f["phase"] == "ended" and f["injected_at"] and f["ended_at"] for f in faults), faults
    assert all(f["recovery_s"] is not None for f in faults), [(f["kind"], f["peak_lag_s"]) for f in faults]


def test_no_record_is_lost_and_no_row_is_wrong(campaign) -> None:
    r = _run(campaign)["results"]
    assert r["records_lost"] == 0, (r["lost_detail"], r["examples"])
    assert r["rows_wrong"] == 0, (r["wrong_detail"], r["examples"])
    assert r["false_exact"] == 0, r["examples"]
    assert r["windows"] > 1_000 and r["exact_windows"] > 0


def test_no_record_is_late_for_a_stall_shorter_than_the_idle_timeout(campaign) -> None:
    r = _run(campaign)["results"]
    assert r["late_records"] == 0, r["dead_letters"]["by_stage_reason"]


def test_the_skewed_producer_and_the_junk_end_in_dead_letters(campaign) -> None:
    r = _run(campaign)["results"]
    assert r["skewed"]["records"] > 0 and r["skewed"]["without_letter"] == 0, r["skewed"]
    assert set(r["skewed"]["letters"]) == {"future"}, r["skewed"]
    assert r["junk"]["records"] > 0 and r["junk"]["without_letter"] == 0


def test_every_window_closed_and_no_service_exited_on_its_own(campaign) -> None:
    run = _run(campaign)
    assert run["closed"] and run["results"]["unjudged_records"] == 0
    assert run["unexpected_exits"] == [], [(e["service"], e["log_tail"]) for e in run["unexpected_exits"]]


def test_shed_windows_hold_the_offered_count_at_the_stated_rate(campaign) -> None:
    v = _run(campaign)["verdicts"]["coverage"]
    assert v["ok"], v["detail"]


def test_the_campaign_passes_and_leaves_nothing_running(campaign) -> None:
    assert campaign["summary"]["acceptance"]["ok"], campaign["stdout"][-3000:]
    assert campaign["exit_code"] == 0
    assert _processes_naming(campaign["folder"]) == []
