"""The run: a broker of its own, the placements, their phases taking turns, the report.

Why the placements are built before any phase runs: each Ballast placement's reduce job is a
Spark process of its own, and starting them side by side costs one start-up instead of three;
the phases then run one placement at a time, so no two placements compete for the machine.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from ballast.devstack.stack import start_stack, stop_stack
from ballast.kafka.configuration import KafkaConfig
from bench.reduce import __doc__ as DOC
from bench.reduce.params import QUICK, ROOT, WORKERS, Params, log
from bench.reduce.phases import run_phase
from bench.reduce.placement import Placement
from bench.reduce.plot import plot
from bench.reduce.report import build_report, print_summary
from bench.reduce.workload import Workload
from bench.run_params import parse_run

# key: (name, label, Spark's groupBy(key), routing updates)
PLACEMENTS = {
    "a": ("a", "(a) spark groupBy(key)", True, False),
    "b": ("b", "(b) ballast hash only", False, False),
    "c": ("c", "(c) ballast + routing updates", False, True),
}


def parse(argv: list[str] | None) -> tuple[Params, Path]:
    return parse_run(
        argv,
        "bench.reduce",
        DOC,
        Params,
        QUICK,
        "a small smoke run (a few minutes)",
        ROOT / "bench" / "results" / "reduce.json",
    )


PARTS = ("placements", "throughput", "soak", "calm", "skew")


def main(argv: list[str] | None = None) -> int:
    params, out = parse(argv)
    parts = [p for p in params.parts.split(",") if p]
    unknown = set(parts) - set(PARTS)
    if unknown:
        print(f"bench.reduce: unknown parts {sorted(unknown)} (known: {', '.join(PARTS)})", file=sys.stderr)
        return 2
    # (a)'s Python workers and every command the run starts use this checkout's code, wherever
    # the benchmark was started from
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))
    # a SIGTERM unwinds like Ctrl-C, so the running contender, the placements' jobs and the broker
    # are stopped by the finally blocks (the default action would leave them running)
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))
    workdir = Path(tempfile.mkdtemp(prefix="ballast-bench-reduce-"))
    log(f"starting a broker in {workdir}; params {asdict(params)}")
    started = time.monotonic()
    stack = start_stack(workdir / "stack", brokers=1)
    placements: list[Placement] = []
    spark = None
    ok = False
    try:
        kafka = KafkaConfig.plaintext(stack.bootstrap, "bench-reduce")
        if "throughput" in parts:
            from bench.reduce import throughput, throughput_plot

            tp = throughput.run_throughput(params, kafka, workdir, started)
            write(tp, out.with_name(out.stem + "-throughput.json"), throughput_plot.plot)
            throughput.print_summary(tp)
        if "soak" in parts:
            from bench.reduce import soak, soak_plot

            sk = soak.run_soak(params, kafka, workdir, started)
            write(sk, out.with_name(out.stem + "-soak.json"), soak_plot.plot)
            soak.print_summary(sk)
        if "calm" in parts:
            from bench.reduce import calm, calm_plot

            cm = calm.run_calm(params, kafka, workdir)
            write(cm, out.with_name(out.stem + "-calm.json"), calm_plot.plot)
            calm.print_summary(cm)
        if "skew" in parts:
            from bench.reduce import skew, skew_plot

            sw = skew.run_skew(params, kafka, workdir, started)
            write(sw, out.with_name(out.stem + "-skew.json"), skew_plot.plot)
            skew.print_summary(sw)
        if "placements" not in parts:
            ok = True
            return 0
        if "a" in params.placements:
            from bench.reduce.baseline import session

            spark = session(workdir, WORKERS)
            log(f"spark up for (a) ({time.monotonic() - started:.0f} s)")

        def placement(key: str, name: str, label: str, cost: float) -> Placement:
            grouping, updates = PLACEMENTS[key][2:]
            pl = Placement(
                name,
                label,
                spark_grouping=grouping,
                updates=updates,
                record_cost_us=cost,
                params=params,
                kafka=kafka,
                spark=spark,
                workdir=workdir,
            )
            placements.append(pl)
            return pl

        chosen = [
            (k, name, label) for k, (name, label, _g, _u) in PLACEMENTS.items() if k in params.placements
        ]
        main_pl = [placement(k, name, label, params.record_cost_us) for k, name, label in chosen]
        for pl in main_pl:
            pl.warm_up()
        log(f"placements ready ({time.monotonic() - started:.0f} s)")
        workload = Workload(params.keys, params.z, params.seed)
        sizes = [params.prefix_records] + [params.slice_records] * params.slices
        for phase in range(params.phases):
            slices = workload.phase(phase, sizes)
            for pl in main_pl:
                run_phase(pl, slices)
            log(f"phase {phase + 1}/{params.phases} done ({time.monotonic() - started:.0f} s)")
        for pl in main_pl:
            pl.finish()  # an idle query still asks the broker for offsets at every trigger

        uni_pl = [placement(k, f"u{k}", f"uniform {label[:3]}", 0.0) for k, _n, label in chosen if k in "ab"]
        for pl in uni_pl:
            pl.warm_up()
        uniform = Workload(params.keys, 0.0, params.seed + 5)
        for rnd in range(params.uniform_rounds):
            slices = uniform.phase(rnd, [params.uniform_slice_records] * params.uniform_slices)
            for s in slices:
                s.index += 1  # no prefix here: every slice is a full one
            for pl in uni_pl:
                run_phase(pl, slices)
            log(f"uniform round {rnd + 1}/{params.uniform_rounds} done ({time.monotonic() - started:.0f} s)")
        for pl in uni_pl:
            pl.finish()

        report = build_report(params, main_pl, uni_pl, time.monotonic() - started)
        write(report, out, plot)
        print_summary(report)
        ok = True
    finally:
        for pl in placements:
            try:
                pl.close()
            except Exception as exc:  # keep closing the others
                log(f"closing {pl.label}: {exc}")
        if spark is not None:
            spark.stop()
        stop_stack(workdir / "stack", purge=True)
        if ok:
            shutil.rmtree(workdir, ignore_errors=True)
        else:  # the services' logs say what went wrong
            log(f"logs of the services kept in {workdir}/pipeline-*/services")
    return 0


def write(report: dict, path: Path, draw) -> None:
    """A part's report as JSON, and its figure beside it (same name, ``.png``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n")
    draw(report, path.with_suffix(".png"))
    log(f"wrote {path} and {path.with_suffix('.png')}")


if __name__ == "__main__":
    sys.exit(main())
