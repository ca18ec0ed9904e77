"""``python -m bench.chaos --seeds 10 [--short] [--first-seed N] [--out FILE]``: the campaign over its
seeds, the JSON written after every seed (a long campaign cut short keeps what it measured), the
plot at the end; exit 0 when the acceptance holds and every run passed every verdict."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import tempfile
import time
from dataclasses import asdict, fields, replace
from pathlib import Path
from typing import Any

from bench.chaos.params import RESULTS, SHORT, Params, log
from bench.chaos.plan import check
from bench.chaos.plot import plot
from bench.chaos.report import run_ok, summary, verdicts
from bench.chaos.run import keep_logs, run_seed


def parse(argv: list[str] | None) -> tuple[Params, argparse.Namespace]:
    ap = argparse.ArgumentParser(prog="python -m bench.chaos", description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--seeds", type=int, default=10, help="how many campaigns (seeds first-seed, +1, …)")
    ap.add_argument("--first-seed", type=int, default=1)
    ap.add_argument(
        "--short", action="store_true", help="the short campaign (one of each fault, about 6 minutes)"
    )
    ap.add_argument(
        "--out", default=None, help="the JSON (default bench/results/chaos.json, chaos-short.json)"
    )
    ap.add_argument("--workdir", default=None, help="where the runs' stacks go (default: a temporary folder)")
    defaults = asdict(Params())
    for f in fields(Params):
        ap.add_argument(
            f"--{f.name.replace('_', '-')}",
            type=type(defaults[f.name]),
            default=None,
            help=f"default {defaults[f.name]}",
        )
    args = ap.parse_args(argv)
    values = defaults | (SHORT if args.short else {})
    values |= {f.name: getattr(args, f.name) for f in fields(Params) if getattr(args, f.name) is not None}
    return Params(**values), args


def run_campaign(
    p: Params, seeds: list[int], out: Path, workdir: Path | None = None, short: bool = False
) -> dict[str, Any]:
    """Every seed's run, the report written to ``out`` (and ``out`` with .png); the report."""
    check(p)
    out.parent.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="ballast-chaos-", dir=workdir))
    report: dict[str, Any] = {
        "params": asdict(p),
        "short": short,
        "started_at": time.time(),
        "folder": str(folder),
        "runs": [],
    }
    log(f"campaign of {len(seeds)} seed(s) in {folder}")
    for seed in seeds:
        run = run_seed(p, seed, folder, log)
        run["verdicts"] = verdicts(run)
        report["runs"].append(run)
        failed = [k for k, v in run["verdicts"].items() if not v["ok"]]
        verdict = "PASS" if not failed else "FAIL: " + ", ".join(failed)
        log(f"seed {seed}: {verdict} ({run['duration_s']:.0f} s)")
        report["summary"] = summary(report["runs"])
        report["duration_s"] = round(time.time() - report["started_at"], 1)
        out.write_text(json.dumps(report, indent=1, default=str))
    plot(report, out.with_suffix(".png"))
    if all(run_ok(r["verdicts"]) for r in report["runs"]):
        import shutil

        shutil.rmtree(folder, ignore_errors=True)
    else:
        keep_logs(folder)
        log(f"the services' logs are kept in {folder}")
    return report


def main(argv: list[str] | None = None) -> int:
    # a SIGTERM unwinds like Ctrl-C, so the seed's brokers and services are torn down (the default
    # action ended the harness and left three brokers running)
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))
    p, args = parse(argv)
    name = "chaos-short.json" if args.short else "chaos.json"
    out = Path(args.out) if args.out else RESULTS / name
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    report = run_campaign(p, seeds, out, Path(args.workdir) if args.workdir else None, args.short)
    s = report["summary"]
    log(
        f"{s['acceptance']['clean_runs']} runs with 0 lost, 0 wrong, 0 false exact; "
        f"lost {s['records_lost']}, wrong {s['rows_wrong']}, false exact {s['false_exact']}, "
        f"late {s['late_records']}; wrote {out}"
    )
    # the acceptance, and every verdict of every run (late records, faults ended, windows
    # closed, no service exiting on its own, coverage): a campaign that passes one and not the
    # other is not a pass
    return 0 if s["acceptance"]["ok"] and all(run_ok(r["verdicts"]) for r in report["runs"]) else 1


def params_with(p: Params, **changes: Any) -> Params:
    return replace(p, **changes)
