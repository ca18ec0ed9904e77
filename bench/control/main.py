"""The run: a broker of its own, the cases one after the other, the report.

Why the cases run one at a time on one broker: they would compete for the two cores otherwise,
and the comparison between 1 and 4 routers, steady and idle, is the point.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from dataclasses import asdict, fields
from pathlib import Path

from ballast.devstack.stack import start_stack, stop_stack
from ballast.kafka.configuration import KafkaConfig
from bench.control import __doc__ as DOC
from bench.control.case import run_case
from bench.control.params import INPUT_PARTITIONS, ROOT, TARGET_P99_MS, WORKERS, Params, log
from bench.control.plot import plot
from bench.control.report import brief, print_table
from bench.control.watch import FETCH_WAIT_MS

NOTES = {
    "latency": (
        "control record's broker append time (LogAppendTime) -> the epoch's marker visible to a "
        "read_committed follower in every routed partition for every input partition (its receive time)"
    ),
    "split": (
        "control: append -> the control record visible to the follower (the writer's commit); router: "
        "-> the broker's append time of the epoch's last marker (noticed, open transaction committed, "
        "markers written); commit: -> the markers visible (their transaction committed). Each part's "
        "percentiles are its own: they do not add up to the total's"
    ),
    "routers": "ballast router run processes with their default settings, through the harness (Pipeline)",
}


def parse(argv: list[str] | None) -> tuple[Params, Path]:
    ap = argparse.ArgumentParser(description=(DOC or "").splitlines()[0])
    defaults = Params()
    for f in fields(Params):
        value = getattr(defaults, f.name)
        flag = "--" + f.name.replace("_", "-")
        if isinstance(value, bool):
            ap.add_argument(flag, action=argparse.BooleanOptionalAction, default=value)
        elif isinstance(value, tuple):
            kind = type(value[0])
            ap.add_argument(flag, type=lambda s, k=kind: tuple(k(v) for v in s.split(",")), default=value)
        else:
            ap.add_argument(flag, type=type(value), default=value)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "control.json"))
    args = vars(ap.parse_args(argv))
    out = Path(args.pop("out"))
    return Params(**args), out


def main(argv: list[str] | None = None) -> int:
    params, out = parse(argv)
    state_dir = Path(tempfile.mkdtemp(prefix="ballast-bench-control-"))
    log(f"starting a broker in {state_dir}")
    stack = start_stack(state_dir, brokers=1)
    cases = []
    try:
        kafka = KafkaConfig.plaintext(stack.bootstrap, "bench-control")
        for routers in params.routers:
            for load in params.loads:
                rate = f" at {params.rate:,.0f} records/s" if load == "steady" else ""
                log(f"case: {routers} router(s), {load}{rate}, {params.events} events")
                result = run_case(kafka, params, routers, load)
                cases.append(result.to_json())
                log(f"{routers} router(s), {load}: {brief(cases[-1]['latency_ms'])}")
    finally:
        stop_stack(state_dir, purge=True)
    report = {
        "params": asdict(params),
        "input_partitions": INPUT_PARTITIONS,
        "routed_partitions": WORKERS,
        "follower_fetch_wait_max_ms": FETCH_WAIT_MS,
        "target_p99_ms": TARGET_P99_MS,
        "cpus": os.cpu_count(),
        "notes": NOTES,
        "cases": cases,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")
    plot(cases, out.with_suffix(".png"))
    print_table(cases)
    log(f"wrote {out} and {out.with_suffix('.png').name}")
    return 0
