"""The run: a broker of its own, the capacity measured, then each case on a fresh deployment, the report."""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.run_params import parse_run
from bench.scratch_broker import ScratchBroker
from bench.shed import __doc__ as DOC
from bench.shed.capacity import calibrate
from bench.shed.case import run_case, schedule, sequence
from bench.shed.params import CASES, QUICK, ROOT, WORKERS, Params, log
from bench.shed.plot import plot
from spark_jobs.durations import interval_ms


def parse(argv: list[str] | None) -> tuple[Params, Path]:
    return parse_run(
        argv,
        "bench.shed",
        DOC,
        Params,
        QUICK,
        "a smoke run (shorter phases, the off case undrained)",
        ROOT / "bench" / "results" / "shed.json",
    )


def acceptance(params: Params, cal: dict[str, Any] | None, cases: dict[str, Any]) -> dict[str, Any]:
    """The acceptance's verdicts gathered from the cases' (None: the case that decides it did not run)."""
    on, off = cases.get("on", {}), cases.get("off", {})

    def get(case: dict[str, Any], *path: str) -> Any:
        for p in path:
            if not isinstance(case, dict) or p not in case:
                return None
            case = case[p]
        return case

    under = get(on, "verdicts", "lag", "back_under_target")
    grows = get(off, "verdicts", "lag", "grows_without_bound")
    lifted = get(on, "verdicts", "lifting", "lifted_in_time")
    early = get(on, "verdicts", "lifting", "shed_before_overload")
    exact = get(on, "verdicts_results", "exact_again", "exact_again")
    # the highest p90 of the lags measured with calm input: the calibration's and each case's warm phase
    calm = [get(cal or {}, "natural_lag", "p90_s")] + [get(c, "calm_lag", "p90_s") for c in cases.values()]
    natural = max((x for x in calm if x is not None), default=None)
    return {
        "2_lag_back_under_target_on": under,
        "2_lag_grows_without_bound_off": grows,
        "4_interval_coverage": get(on, "verdicts_results", "coverage", "covered"),
        "6_lifted_within_cycles": lifted,
        "6_exact_again": exact,
        "no_shed_before_overload": None if early is None else early == 0,
        "target_at_least_twice_natural_lag": None if natural is None else params.target_s >= 2 * natural,
        "cycle_not_shorter_than_trigger": params.cycle_s * 1000 >= interval_ms(params.trigger),
    }


def main(argv: list[str] | None = None) -> int:
    params, out = parse(argv)
    cases = [c for c in params.cases.split(",") if c]
    unknown = set(cases) - set(CASES)
    if unknown:
        print(f"bench.shed: unknown cases {sorted(unknown)} (known: {', '.join(CASES)})", file=sys.stderr)
        return 2
    if params.cycle_s * 1000 < interval_ms(params.trigger):
        print(f"bench.shed: --cycle-s {params.cycle_s:g} is shorter than the trigger {params.trigger} "
              "(docs/shedder.md, 'What to read carefully')", file=sys.stderr)  # fmt: skip
        return 2
    # every command the run starts uses this checkout's code, wherever the benchmark was started from
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))
    started = time.monotonic()
    results: dict[str, Any] = {}
    cal: dict[str, Any] | None = None
    with ScratchBroker("shed", log) as run:
        log(f"a broker in {run.workdir}; cases {cases}; params {asdict(params)}")
        kafka, workdir = run.kafka, run.workdir
        assert kafka is not None
        capacity = params.capacity
        if capacity <= 0:
            log(f"--- calibration ({time.monotonic() - started:.0f} s) ---")
            cal = calibrate(params, kafka, workdir)
            capacity = cal["capacity"]
        events = sequence(params.keys, params.z, params.seed, schedule(params, capacity))
        for case in cases:
            log(f"--- shedding {case} ({time.monotonic() - started:.0f} s) ---")
            results[case] = run.each(
                "case", case, lambda c=case: run_case(c, params, kafka, workdir, events, capacity)
            )
    report = {
        "params": asdict(params),
        "workers": WORKERS,
        "spark_master": f"local[{WORKERS}]",
        "elapsed_s": round(time.monotonic() - started),
        "calibration": cal,
        "acceptance": acceptance(params, cal, results),
        "cases": results,
        "notes": {
            "lag": "exact time lag from the broker: now - timestamp of the record at the stage's position "
            "(routers: group commits on the input; reduce: its last ReduceProgress end offsets on the "
            "routed topic); the verdicts judge router + reduce",
            "truth": "per (key, window) every record the feeder produced, shed or not; sums only of rows "
            "without late records",
            "coverage": "shed windows (final row not exact, or no row while shedding was in force) whose "
            "true count / sum lies in the row's 95% interval",
        },
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")
    plot(report, out.with_suffix(".png"))
    log(f"wrote {out} and {out.with_suffix('.png')}")
    print_summary(report)
    return 0 if not run.failed and all(v is not False for v in report["acceptance"].values()) else 1


def print_summary(report: dict[str, Any]) -> None:
    print()
    cal = report["calibration"] or {}
    lag = cal.get("natural_lag") or {}
    print(f"shedding benchmark: {report['elapsed_s']} s; capacity {cal.get('capacity', '-')} records/s, "
          f"lag when keeping up p90 {lag.get('p90_s', '-')} s, target {report['params']['target_s']:g} s, "
          f"cycle {report['params']['cycle_s']:g} s")  # fmt: skip
    for name, r in report["cases"].items():
        if "error" in r:
            print(f"  {name}: failed: {r['error']}")
            continue
        from bench.shed.case import verdict_line

        print(f"  {name}: {verdict_line(r)}")
    for k, v in report["acceptance"].items():
        print(f"  {k:<40} {'-' if v is None else ('PASS' if v else 'FAIL')}")
