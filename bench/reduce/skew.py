"""Skew: per-key CPU work under a drifting Zipf hot set, Ballast against Spark's best per-key query.

The question: for per-key work that Spark cannot pre-aggregate, is Ballast faster than the query
a Spark expert writes, given the same task slots? The peers are ``groupBy(key)`` with
``transformWithStateInPandas`` or ``applyInPandasWithState`` (:mod:`bench.reduce.peer`) at P = S,
4S and 8S shuffle partitions (over-partitioning is Spark's own skew remedy), Ballast the reduce
job, hash only (its 8 routed partitions = 8 workers, so 8 tasks on the same S slots). Each runs
the same processor with the
same simulated cost per record (``--sk-cost-kind cpu``: a spin on the task thread's CPU clock,
standing for per-key computation; ``sleep`` stands for blocking I/O).

Per skew (Zipf z) and seed, one backlog (:func:`bench.reduce.backlog.drifting_events`: the hot
set moves ``sk_phases`` times) is routed once; every contender reads it from the start, one at a
time, the order turning by one each seed. Figures as in :mod:`bench.reduce.throughput`: records/s
over the steady batches at the cap (a backlog drained at this rate is the rate the contender
sustains with its lag bounded by one batch), batch p50/p99, CPU µs per record, every run checked
against the reference. Ratios, per skew: Ballast ÷ the best peer of the same seed, and their
median over the seeds. For Ballast, the busiest worker's share of a batch's records against the
bound max(1/workers, the hottest key's share): the part of a batch no placement can spread.

Not here yet: p99 latency at a fixed paced rate (the batch p99 at the cap stands in), Ballast
with routing updates on the drifting hot set, and the Ballast engine on Spark's hash.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from ballast.kafka.configuration import KafkaConfig
from ballast.workload import zipf_probabilities
from bench.reduce.backlog import default_start_ms, drifting_events, fill, reference
from bench.reduce.check import equal
from bench.reduce.figures import pct
from bench.reduce.params import PER_MS, WORKERS, Params, log
from bench.reduce.runs import CONTENDERS, PEERS, Run, run
from bench.reduce.throughput import (
    batch_steps,
    check_run,
    rounds_order,
    settings,
    slim,
    steady,
    summarize_run,
)


def busiest_shares(r: Run, warmup: int, cap: int) -> list[float]:
    """Per steady batch of a Ballast run: the busiest worker's share of the batch's records."""
    out = []
    for b in steady(r.batches, warmup, cap):
        per: dict[int, int] = {}
        for w in batch_steps(r, b):
            per[w["worker"]] = per.get(w["worker"], 0) + w["records"]
        total = sum(per.values())
        if total:
            out.append(max(per.values()) / total)
    return out


def run_seed(
    z: float, seed_index: int, params: Params, kafka: KafkaConfig, workdir: Path, started: float
) -> list[dict[str, Any]]:
    """Every contender once on the backlog of one (z, seed)."""
    contenders = [c for c in params.sk_contenders.split(",") if c]
    window = params.tp_window_ms
    seed = params.seed + 1000 * seed_index
    events = drifting_events(
        params.sk_events, params.sk_keys, z, seed, PER_MS, default_start_ms(window), params.sk_phases
    )
    backlog = fill(kafka, workdir, f"sk-z{z:g}-s{seed_index}".replace(".", "_"), events)
    ref = reference(events, window)
    s = replace(
        settings(params, params.sk_cap),
        record_cost_us=params.sk_cost_us,
        record_cost_kind=params.sk_cost_kind,
    )
    out = []
    try:
        for contender in rounds_order(contenders, seed_index):
            r = run(contender, backlog, seed_index, s, workdir)
            summary = summarize_run(r, params.sk_warmup_batches, params.sk_cap)
            summary["z"], summary["seed"] = z, seed
            summary["check"] = check_run(r, backlog, ref, window)
            if contender == "ballast":
                shares = busiest_shares(r, params.sk_warmup_batches, params.sk_cap)
                summary["busiest_worker_share_p50"] = round(pct(shares, 50), 3) if shares else None
            summary["batches_kept"] = [slim(b) for b in r.batches]
            out.append(summary)
            log(
                f"skew z={z:g} seed {seed_index + 1}/{params.sk_seeds} {contender}: "
                f"{summary['records_per_s']:,.0f} records/s, batch p50 {summary['batch_p50_ms']} ms, "
                f"p99 {summary['batch_p99_ms']} ms, CPU {summary['cpu_us_per_record']} µs/record, "
                f"check {'ok' if equal(summary['check']) else summary['check']} "
                f"({time.monotonic() - started:.0f} s)"
            )
    finally:
        backlog.close()
    return out


def skew_summary(z: float, runs: list[dict[str, Any]], cores: int, keys: int) -> dict[str, Any]:
    """One skew's table: per contender the median rate, p50/p99, CPU per record; Ballast ÷ the
    best peer of each seed, and the bound on the busiest worker."""
    rows: dict[str, Any] = {}
    for contender in dict.fromkeys(r["contender"] for r in runs):
        mine = [r for r in runs if r["contender"] == contender]
        rates = [r["records_per_s"] for r in mine]
        cpu = [r["cpu_us_per_record"] for r in mine if r["cpu_us_per_record"]]
        rows[contender] = {
            "label": CONTENDERS[contender],
            "records_per_s_median": round(statistics.median(rates), 1),
            "records_per_s": rates,
            "batch_p50_ms_median": round(statistics.median(r["batch_p50_ms"] for r in mine)),
            "batch_p99_ms_median": round(statistics.median(r["batch_p99_ms"] for r in mine)),
            "cpu_us_per_record_median": round(statistics.median(cpu), 1) if cpu else None,
            "checks_ok": all(equal(r["check"]) for r in mine),
        }
        shares = [r["busiest_worker_share_p50"] for r in mine if r.get("busiest_worker_share_p50")]
        if shares:
            rows[contender]["busiest_worker_share_median"] = round(statistics.median(shares), 3)
    ratios = []
    for seed in dict.fromkeys(r["seed"] for r in runs):
        of_seed = {r["contender"]: r["records_per_s"] for r in runs if r["seed"] == seed}
        peers = {c: v for c, v in of_seed.items() if c in PEERS}
        if "ballast" in of_seed and peers and max(peers.values()) > 0:
            best = max(peers, key=peers.__getitem__)
            ratios.append(
                {"seed": seed, "best_peer": best, "ratio": round(of_seed["ballast"] / peers[best], 3)}
            )
    hottest = float(zipf_probabilities(keys, z)[0]) if z > 0 else 1.0 / keys
    return {
        "z": z,
        "contenders": rows,
        "ballast_over_best_peer": ratios,
        "ballast_over_best_peer_median": (
            round(statistics.median(r["ratio"] for r in ratios), 3) if ratios else None
        ),
        "hottest_key_share": round(hottest, 4),
        "busiest_share_bound": round(max(1.0 / WORKERS, hottest), 4),
        "slot_share": round(1.0 / cores, 4),
    }


def run_skew(params: Params, kafka: KafkaConfig, workdir: Path, started: float) -> dict[str, Any]:
    """The skew part: every skew, every seed, the report."""
    zs = [float(z) for z in params.sk_zipfs.split(",") if z]
    unknown = {c for c in params.sk_contenders.split(",") if c} - set(CONTENDERS)
    if unknown:
        raise ValueError(f"unknown contenders {sorted(unknown)} (known: {', '.join(CONTENDERS)})")
    runs: list[dict[str, Any]] = []
    for z in zs:
        for i in range(params.sk_seeds):
            log(
                f"skew z={z:g}, seed {i + 1}/{params.sk_seeds}: "
                f"{params.sk_events:,} events, {params.sk_keys:,} keys"
            )
            runs += run_seed(z, i, params, kafka, workdir, started)
    return {
        "params": asdict(params),
        "slots": params.tp_cores,
        "workers": WORKERS,
        "spark_master": f"local[{params.tp_cores}]",
        "elapsed_s": round(time.monotonic() - started),
        "notes": {
            "cost": f"{params.sk_cost_us} µs of {params.sk_cost_kind} per record at the stateful step, in "
            "every contender (cpu: a spin on the task thread's CPU clock, standing for per-key computation)",
            "records_per_s": "Kafka records read / sum of the steady batches' triggerExecution at the cap: "
            "the rate sustained with lag bounded by one batch",
            "ratio": "Ballast's records/s ÷ the best peer's of the same seed (same backlog, minutes apart)",
            "busiest_worker_share": "Ballast: the busiest worker's share of a steady batch's records; "
            "busiest_share_bound = max(1/workers, hottest key's share), slot_share = 1/S",
        },
        "skews": [
            skew_summary(z, [r for r in runs if r["z"] == z], params.tp_cores, params.sk_keys) for z in zs
        ],
        "runs": runs,
    }


def print_summary(report: dict[str, Any]) -> None:
    print()
    print(
        f"{'z':<6}{'contender':<40}{'rec/s (median)':>15}{'p50 s':>8}{'p99 s':>8}{'CPU µs/rec':>12}{'ok':>5}"
    )
    for sk in report["skews"]:
        for c in sk["contenders"].values():
            print(
                f"{sk['z']:<6g}{c['label']:<40}{c['records_per_s_median']:>15,.0f}"
                f"{c['batch_p50_ms_median'] / 1000:>8.2f}{c['batch_p99_ms_median'] / 1000:>8.2f}"
                f"{c['cpu_us_per_record_median'] or 0:>12.1f}{'yes' if c['checks_ok'] else 'NO':>5}"
            )
        print(f"  z={sk['z']:g} Ballast ÷ best peer: {sk['ballast_over_best_peer']} "
              f"(median {sk['ballast_over_best_peer_median']})")  # fmt: skip
