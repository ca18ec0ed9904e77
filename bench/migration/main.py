"""The run: a broker of its own, one fresh deployment per pacing mode on the same input, the report."""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.migration import __doc__ as DOC
from bench.migration.params import MODES, QUICK, ROOT, WORKERS, Params, log
from bench.migration.plot import plot
from bench.migration.run import run_mode
from bench.migration.stream import stale_pins, stream
from bench.reduce.backlog import default_start_ms
from bench.run_params import parse_run
from bench.scratch_broker import ScratchBroker


def parse(argv: list[str] | None) -> tuple[Params, Path]:
    return parse_run(
        argv,
        "bench.migration",
        DOC,
        Params,
        QUICK,
        "a smaller smoke run (fewer keys moved, shorter phases)",
        ROOT / "bench" / "results" / "migration.json",
    )


def main(argv: list[str] | None = None) -> int:
    params, out = parse(argv)
    modes = [m for m in params.modes.split(",") if m]
    unknown = set(modes) - set(MODES)
    if unknown:
        print(
            f"bench.migration: unknown modes {sorted(unknown)} (known: {', '.join(MODES)})", file=sys.stderr
        )
        return 2
    # every command the run starts uses this checkout's code, wherever the benchmark was started from
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))
    started = time.monotonic()
    n = int(params.rate * params.max_input_s)
    events = stream(params.keys, params.z, params.seed, params.per_ms, default_start_ms(params.window_ms), n)
    pins = stale_pins(params.keys, params.z, params.seed, params.stale_pins, WORKERS)
    results: dict[str, Any] = {}
    with ScratchBroker("migration", log) as run:
        log(f"a broker in {run.workdir}; modes {modes}; params {asdict(params)}")
        assert run.kafka is not None
        for mode in modes:
            log(f"--- {mode} ({time.monotonic() - started:.0f} s) ---")
            results[mode] = run.each(
                "mode", mode, lambda m=mode: run_mode(m, params, run.kafka, run.workdir, events, pins)
            )
    report = {
        "params": asdict(params),
        "workers": WORKERS,
        "spark_master": f"local[{WORKERS}]",
        "stale_pins": len(pins),
        "elapsed_s": round(time.monotonic() - started),
        "modes": results,
        "notes": {
            "steady": "batches that started settle_s or more after the input began and ended before START",
            "during": "batches that overlap [START, DONE] (log times of issue)",
            "state_bytes_moved": "bytes of the state chunks installed for the migration's (key, step epoch)",
            "duration": "Spark's triggerExecution of each micro-batch (the job's ReduceProgress)",
        },
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    plot(report, out.with_suffix(".png"))
    log(f"wrote {out} and {out.with_suffix('.png')}")
    print_summary(report)
    return 0 if not run.failed and all(r["check"]["exact"] for r in results.values()) else 1


def print_summary(report: dict[str, Any]) -> None:
    def s(ms: float | None) -> str:
        return "-" if ms is None else f"{ms / 1000:.2f}"

    print()
    print(f"migration benchmark: {report['elapsed_s']} s, {report['stale_pins']} stale pins, "
          f"rate {report['params']['rate']}/s, trigger {report['params']['trigger']}")  # fmt: skip
    head = f"{'mode':<12} {'keys':>4} {'steps':>5} {'time s':>7} {'steady p50':>10} {'peak':>6} {'x':>5} "
    print(head + f"{'after p50':>9} {'bytes':>8} {'cpu steady':>10} {'cpu during':>10}  windows")
    for mode, r in report["modes"].items():
        if "error" in r:
            print(f"{mode:<12} failed: {r['error']}")
            continue
        f = r["figures"]
        ok = "exact" if r["check"]["exact"] else "WRONG"
        print(
            f"{mode:<12} {f['keys']:>4} {f['steps']:>5} {f['migration_s']:>7.1f} {s(f['steady_p50_ms']):>10} "
            f"{s(f['peak_ms']):>6} {f['peak_over_steady'] or '-':>5} {s(f['after_p50_ms']):>9} "
            f"{f['state_bytes_moved']:>8,} {f['cpu_steady_p50_s'] or '-':>10} "
            f"{f['cpu_during_p50_s'] or '-':>10}  "
            f"{ok} ({r['check']['windows']:,})"
        )
