"""Each run's verdicts, and the campaign's summary over its seeds. Pure: run reports in, dicts out.

A run passes when it ran to its end and: no record lost, no row wrong, no false exact row, no late
record, every fault injected and ended, every window closed (none left unjudged), no service exited
without a fault holding it down, and the shed windows' intervals held the offered count at the
stated rate (at least ``MIN_COVERAGE`` of them, when there were at least ``MIN_SHED`` to judge; a
run in which nothing was shed says so and is not failed for it). The issue's acceptance is the
first three over every seed, with every record accounted for (none in a window that never came
due) and every fault's recovery time reported.
"""

from __future__ import annotations

from typing import Any

MIN_COVERAGE = 0.90  # of the shed windows' intervals holding the offered count (95 % intervals)
MIN_SHED = 30


def verdicts(run: dict[str, Any]) -> dict[str, Any]:
    """Name -> {ok, detail} for one run."""
    if "error" in run and "results" not in run:
        return {"ran": {"ok": False, "detail": run["error"]}}
    r = run["results"]
    cov = r["coverage"]
    faults = run.get("faults", [])
    ended = [f for f in faults if f["phase"] == "ended"]
    shed = cov["with_interval"]
    covered = cov["count_with_row"]
    out = {
        "ran": (("error" not in run), run.get("error", "to its end")),
        "records_lost": (
            r["records_lost"] == 0,
            f"{r['records_lost']} of {r['records']:,}: {r['lost_detail']}",
        ),
        "rows_wrong": (r["rows_wrong"] == 0, f"{r['rows_wrong']}: {r['wrong_detail']}"),
        "false_exact": (r["false_exact"] == 0, f"{r['false_exact']} of {r['exact_windows']:,} exact windows"),
        "late": (r["late_records"] == 0, f"{r['late_records']} records dead-lettered late or too-late"),
        "faults": (len(ended) == len(faults) > 0, f"{len(ended)} of {len(faults)} injected and ended"),
        "windows_closed": (
            bool(run.get("closed")) and r["unjudged_records"] == 0,
            f"{r['unjudged_windows']} windows ({r['unjudged_records']} records) never due",
        ),
        "no_unexpected_exit": (
            not run.get("unexpected_exits"),
            ", ".join(e["service"] for e in run.get("unexpected_exits", [])) or "none",
        ),
        "coverage": (
            shed < MIN_SHED or (covered is not None and covered >= MIN_COVERAGE),
            f"{covered} of {shed} shed windows with an interval hold the offered count"
            + (" (too few to judge)" if shed < MIN_SHED else ""),
        ),
    }
    return {k: {"ok": bool(ok), "detail": detail} for k, (ok, detail) in out.items()}


def run_ok(v: dict[str, Any]) -> bool:
    return all(x["ok"] for x in v.values())


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Over the seeds: the issue's acceptance, per-seed figures, recovery times per fault kind."""
    judged = [r for r in runs if "results" in r]

    def per(name: str) -> list[int | None]:
        return [r["results"][name] if "results" in r else None for r in runs]

    recovery: dict[str, list[float | None]] = {}
    for r in runs:
        for f in r.get("faults", []):
            recovery.setdefault(f["kind"], []).append(f.get("recovery_s"))
    # a run is clean when nothing is lost or wrong and every record was accounted for: records
    # whose windows never came due (a pipeline that stopped routing) are in no row to judge
    clean = [
        r
        for r in judged
        if r["results"]["records_lost"] == 0
        and r["results"]["rows_wrong"] == 0
        and r["results"]["false_exact"] == 0
        and r["results"]["unjudged_records"] == 0
    ]
    return {
        "seeds": [r["seed"] for r in runs],
        "runs_ok": sum(run_ok(r["verdicts"]) for r in runs),
        "records_lost": per("records_lost"),
        "rows_wrong": per("rows_wrong"),
        "false_exact": per("false_exact"),
        "late_records": per("late_records"),
        "unjudged_records": per("unjudged_records"),
        "recovery_s": recovery,
        "acceptance": {
            "clean_runs": f"{len(clean)} of {len(runs)}",
            "recovery_reported": all(
                f.get("recovery_s") is not None for r in runs for f in r.get("faults", [])
            ),
            "ok": len(clean) == len(runs) > 0
            and all(f.get("recovery_s") is not None for r in runs for f in r.get("faults", [])),
        },
    }
