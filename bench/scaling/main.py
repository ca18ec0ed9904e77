"""The run: a broker of its own, each policy on a fresh deployment, the report and its plot."""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.run_params import parse_run
from bench.scaling import __doc__ as DOC
from bench.scaling.figures import verdicts
from bench.scaling.params import POLICIES, QUICK, ROOT, WORKERS, Params, log
from bench.scaling.plot import plot
from bench.scaling.run import run_policy, sequence
from bench.scratch_broker import ScratchBroker


def parse(argv: list[str] | None) -> tuple[Params, Path]:
    return parse_run(argv, "bench.scaling", DOC, Params, QUICK, "a smoke run (shorter steps and delay)",
                     ROOT / "bench" / "results" / "scaling.json")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    params, out = parse(argv)
    policies = [x for x in params.policies.split(",") if x]
    unknown = set(policies) - set(POLICIES)
    if unknown:
        print(f"bench.scaling: unknown policies {sorted(unknown)} (known: {', '.join(POLICIES)})",
              file=sys.stderr)  # fmt: skip
        return 2
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))
    started = time.monotonic()
    results: dict[str, Any] = {}
    with ScratchBroker("scaling", log) as run:
        log(f"a broker in {run.workdir}; policies {policies}; params {asdict(params)}")
        kafka, workdir = run.kafka, run.workdir
        assert kafka is not None
        events = sequence(params)
        for policy in policies:
            log(f"--- {policy} ({time.monotonic() - started:.0f} s) ---")
            results[policy] = run.each(
                "policy", policy, lambda x=policy: run_policy(x, params, kafka, workdir, events)
            )
    summaries = {k: r["summary"] for k, r in results.items() if "error" not in r}
    report = {
        "params": asdict(params),
        "workers": WORKERS,
        "elapsed_s": round(time.monotonic() - started),
        "acceptance": verdicts_of(summaries),
        "policies": results,
        "notes": {
            "cost": "4 ms of sleep per row at the reduce's stateful step: blocking I/O (a lookup, a model "
            "call); more hashed workers wait side by side, so they add capacity on 2 cores",
            "instance_seconds": "the reduce's hashed workers in force, from the control log's decisions",
        },
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1, default=str) + "\n")
    plot(report, out.with_suffix(".png"))
    log(f"wrote {out} and {out.with_suffix('.png')}")
    for k, v in report["acceptance"].items():
        print(f"  {k:<45} {'-' if v is None else ('PASS' if v else 'FAIL')}")
    return 0 if not run.failed and all(v is not False for v in report["acceptance"].values()) else 1


def verdicts_of(summaries: dict[str, Any]) -> dict[str, Any]:
    """The verdicts from the JSON-shaped summaries (steps as dicts)."""
    from bench.scaling.figures import StepFigures

    shaped = {
        k: {**s, "steps": {st: [StepFigures(**f) for f in figs] for st, figs in s["steps"].items()}}
        for k, s in summaries.items()
    }
    return verdicts(shaped)
