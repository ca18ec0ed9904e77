"""The report: the JSON written to ``bench/results/reduce.json`` and the summary table printed.

Why every batch is in the JSON: percentiles over 12 batches hide a lot; with every batch (its
kind, durations, per-worker records and busy time, chunks) a reader can check any figure, and
:mod:`bench.reduce.plot` draws from the JSON alone.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from bench.reduce.batches import Batch
from bench.reduce.figures import migration_latency, summarize
from bench.reduce.params import INPUT_PARTITIONS, WORKERS, Params
from bench.reduce.placement import Placement


def batch_rows(batches: list[Batch]) -> list[dict]:
    """Every batch as a JSON row (Spark's durations: the ones that say where a batch's time went)."""
    out = []
    for b in batches:
        d = asdict(b)
        d["durations"] = {
            k: v
            for k, v in b.durations.items()
            if k
            in ("addBatch", "queryPlanning", "latestOffset", "walCommit", "commitOffsets", "triggerExecution")
        }
        out.append(d)
    return out


def build_report(params: Params, main_pl: list[Placement], uni_pl: list[Placement], elapsed: float) -> dict:
    """The report of finished placements (:meth:`Placement.finish` kept their batches)."""
    results: dict[str, Any] = {}
    series: dict[str, list[dict]] = {}
    for pl in main_pl:
        batches = pl.batches
        results[pl.name] = summarize(pl.label, sum(pl.slice_records.values()), batches)
        series[pl.name] = batch_rows(batches)
        if pl.updates:
            results[pl.name]["updates"] = pl.updates_sent
            results[pl.name]["unmoved_keys_during_migration"] = migration_latency(batches)
    uniform: dict[str, Any] = {}
    for pl in uni_pl:
        batches = pl.batches
        uniform[pl.name] = summarize(pl.label, sum(pl.slice_records.values()), batches)
        series[pl.name] = batch_rows(batches)
    accept: dict[str, Any] = {}
    if "b" in results and "c" in results and results["c"]["batch_p99_ms"]:
        accept["c_vs_b_p99_improvement"] = round(
            results["b"]["batch_p99_ms"] / results["c"]["batch_p99_ms"], 3
        )
        accept["c_vs_b_p50_improvement"] = round(
            results["b"]["batch_p50_ms"] / results["c"]["batch_p50_ms"], 3
        )
        accept["target_p99_improvement"] = 1.5
    if "a" in results and "c" in results and results["c"]["batch_p99_ms"]:
        accept["c_vs_a_p99_improvement"] = round(
            results["a"]["batch_p99_ms"] / results["c"]["batch_p99_ms"], 3
        )
    if "ua" in uniform and "ub" in uniform and uniform["ua"]["records_per_s"]:
        accept["uniform_b_over_a_throughput"] = round(
            uniform["ub"]["records_per_s"] / uniform["ua"]["records_per_s"], 3
        )
    if "c" in results:
        m = results["c"]["unmoved_keys_during_migration"]
        accept["unmoved_flow_latency_p99_ratio_max"] = m.get("flow_latency_p99_ratio_max")
        accept["unmoved_batch_duration_ratio_max"] = m.get("batch_duration_ratio_max")
    return {
        "params": asdict(params),
        "workers": WORKERS,
        "input_partitions": INPUT_PARTITIONS,
        "spark_master": f"local[{WORKERS}]",
        "elapsed_s": round(elapsed),
        "notes": {
            "batch": "triggerExecution of the full-slice batches (one slice each, same in every placement)",
            "records_per_s": "data records / sum of the placement's batch durations (warm-up excluded)",
            "load": "data records per worker (WorkerStats) or Spark partition (a): max/mean per full slice",
            "migration": "(c) per phase: batches with chunks shipped/installed or records held vs the others",
            "record_cost": "record_cost_us is a sleep per record at the stateful step: I/O-bound work such "
            "as an enrichment call. Eight tasks overlap their sleeps on 2 cores, so the busiest worker's "
            "load shows in the batch time; CPU-bound work of the same size would not overlap on 2 cores",
        },
        "acceptance": accept,
        "results": results,
        "uniform": uniform,
        "batches": series,
    }


def print_summary(report: dict) -> None:
    """The placements' table (full-slice batches; partial ones are left out of it), what the
    routing updates moved, and the acceptance figures."""
    print()
    print(
        f"{'placement':<34}{'p50 s':>8}{'p99 s':>8}{'rec/s':>10}{'load max/mean':>15}{'worst':>8}"
        f"{'full':>6}{'partial':>9}"
    )
    for r in [*report["results"].values(), *report["uniform"].values()]:
        print(
            f"{r['placement']:<34}{r['batch_p50_ms'] / 1000:>8.1f}{r['batch_p99_ms'] / 1000:>8.1f}"
            f"{r['records_per_s']:>10,.0f}{r['load_max_over_mean_mean'] or 0:>15.2f}"
            f"{r['load_max_over_mean_max'] or 0:>8.2f}{r['full_slice_batches']:>6}{r['partial_batches']:>9}"
        )
    for name, r in report["results"].items():
        if "updates" in r:
            rows = report["batches"][name]
            print(
                f"  {r['placement']}: {len(r['updates'])} planning rounds, "
                f"{sum(u['assign'] for u in r['updates'])} keys assigned, "
                f"{sum(u['unassign'] for u in r['updates'])} back to the hash; chunks sent "
                f"{sum(b['chunks_sent'] for b in rows)}, installed {sum(b['chunks_installed'] for b in rows)}"
            )
    for k, v in report["acceptance"].items():
        print(f"  {k}: {v}")
