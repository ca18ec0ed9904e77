"""Synthetic demo summaries for the report's tests: shaped like a real run, small enough to read.

Why shared: the unit test of the report and the browser test must draw the same kind of record a
demo writes, so both build it here instead of each inventing one.
"""

from __future__ import annotations

import math

from services.demo.summary import DemoSummary, RunSummary, Verdict

END_S = 120.0
SHIFTS = [0.0, 40.0, 80.0]
BURST = [50.0, 70.0]


def _run(name: str, ballast: bool) -> RunSummary:
    times = [float(t) for t in range(0, int(END_S), 5)]
    settle = [1.05 + 1.5 * math.exp(-((t % 40) / 8)) for t in times]  # back down after each shift
    imbalance = [[t, round(v if ballast else v + 0.9, 3)] for t, v in zip(times, settle, strict=True)]
    in_burst = [BURST[0] <= t < BURST[1] for t in times]
    peak = 1.0 if ballast else 4.0  # shedding keeps Ballast's reduce near the target
    lag = [[t, 0.2 + (1.5 if b else 0.0), None if i % 7 == 3 else 0.8 + (peak if b else 0.0)]
           for i, (t, b) in enumerate(zip(times, in_burst, strict=True))]  # fmt: skip
    run = RunSummary(
        name=name, rebalance=ballast, shedding=ballast, theta=0.2, interval_s=5.0, target_s=3.0,
        shifts_s=list(SHIFTS), burst_s=list(BURST), imbalance=imbalance,
        batches=[[t, 900.0 + (2500.0 if b else 0.0) + (0 if ballast else 800), 1000.0]
                 for t, b in zip(times, in_burst, strict=True)],
        lag=lag,
        keep=[[0.0, 1.0], [52.0, 0.6], [60.0, 0.45], [72.0, 1.0]] if ballast else [[0.0, 1.0]],
        figures={"events": 123_456, "max_mean_median": 1.0731, "settle_intervals": [2, None, 3],
                 "closed_windows": 24, "results": {"exact": 20, "shed": 4}, "ratio": 0.000123},
        logs={"router-0": "/tmp/demo/router-0.log"},
    )  # fmt: skip
    if ballast:
        run.table = [[2.0, 1.0, 5.0], [42.0, 2.0, 8.0], [82.0, 3.0, 6.0]]
        run.migrations = [[42.5, 2, "START", 3], [44.0, 2, "STATE_SENT", 3], [45.0, 2, "DONE", 3],
                          [82.5, 3, "START", ["k1", "k2"]], [90.0, 3, "ABORT", ["k1", "k2"]]]  # fmt: skip
        run.result_error = [[50.0, 10, 4, 0.031, 0.75], [60.0, 10, 6, 0.054, 0.5], [70.0, 10, 0, None, None]]
    return run


def both_runs() -> DemoSummary:
    """Ballast and hash only, a failed verdict whose text needs escaping, and a failed service."""
    return DemoSummary(
        ok=False, started_at=1_760_000_000.0, duration_s=END_S,
        settings={"records_per_s": 2000, "theta": 0.2, "workers": 4, "zipf": 1.1, "connect": True},
        runs={"ballast": _run("ballast", True), "hash": _run("hash", False)},
        verdicts=[
            Verdict("max/mean back under 1.2 within 3 intervals of each shift", True, "2, 3, 3"),
            Verdict("lag <target> & \"quotes\"", False, "peak <b>5.2</b> s > 3 s"),
        ],
        failure={"service": "shedder", "reason": "exited <1> & gone", "log": "/tmp/demo/shedder.log"},
    )  # fmt: skip


def ballast_only_empty() -> DemoSummary:
    """Only the Ballast run, and it measured nothing: every plot must still render (as "no data")."""
    run = RunSummary(name="ballast", rebalance=True, shedding=True, theta=0.2, interval_s=5.0, target_s=3.0)
    return DemoSummary(ok=True, runs={"ballast": run}, verdicts=[Verdict("nothing to check", True, "")])
