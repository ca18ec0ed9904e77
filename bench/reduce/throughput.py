"""Throughput: Ballast's ``aggregate`` against the query a Spark user writes instead, same data.

For each key distribution (uniform, Zipf(z)) one backlog is written and routed once
(:mod:`bench.reduce.backlog`); then, round after round, every contender
(:mod:`bench.reduce.runs`) reads it all from the start, one at a time, with the same trigger, the
same batch cap, the same ``local[cores]`` master and 8 partitions. The order of the contenders
turns by one every round, so a drift in the machine's load falls on each of them in turn.

Figures, per run, over the *steady* batches: the first ``warmup`` batches (start-up, JIT,
first state) and any batch under 90 % of the cap (the backlog's tail, the batch that closes the
last windows) are left out. Records/s = Kafka records read / sum of those batches' durations
(Spark's ``triggerExecution``; the records include the router's markers, 0.01-0.02 % of them);
batch p50/p99 over the steady batches of all rounds; CPU seconds per batch of the contender's
own processes, by kind (:mod:`bench.reduce.cpu`). Ratios are paired within a round: Ballast's
records/s over the native query's in the same round, on the same backlog, minutes apart; the
partition stage prototype (:mod:`bench.reduce.partition_stage`) is paired the same way.

Correctness, per run (:mod:`bench.reduce.check`): the windows it wrote against the reference,
and Ballast's against the native query's of the same round, window by window.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from ballast.kafka.configuration import KafkaConfig
from bench.reduce.backlog import Backlog, default_start_ms, fill, keyed_events, reference
from bench.reduce.check import closed_reference, compare, equal, latest, worker_watermarks
from bench.reduce.figures import pct
from bench.reduce.params import PER_MS, WORKERS, Params, log
from bench.reduce.runs import CONTENDERS, Run, RunSettings, run

KEPT_CUSTOM = (
    "rocksdbCommitFileSyncLatencyMs",
    "rocksdbGetCount",
    "rocksdbPutCount",
    "rocksdbTotalBytesWritten",
    "numRegisteredTimers",
    "numExpiredTimers",
)


def settings(params: Params, cap: int) -> RunSettings:
    return RunSettings(
        cap=cap,
        cores=params.tp_cores,
        trigger=f"{params.tp_trigger_ms} milliseconds",
        window_ms=params.tp_window_ms,
        watermark_delay=params.watermark_delay,
    )


def steady(batches: list[dict], warmup: int, cap: int) -> list[dict]:
    """The batches that compare: after the warm-up, at least 90 % of the cap."""
    return [b for b in batches if b["id"] >= warmup and b["rows"] >= 0.9 * cap]


def batch_steps(run: Run, batch: dict) -> list[dict]:
    """Ballast's worker steps written while ``batch`` ran. ``WorkerStats`` carry no batch id, so a
    step belongs to the last batch started at or before it (a query's batches never overlap); a
    window around each batch instead counted the steps that end one batch in the next as well,
    when the backlog keeps the batches back to back (a few ms apart)."""
    starts = sorted(b["start_ms"] for b in run.batches)
    later = [t for t in starts if t > batch["start_ms"]]
    hi = later[0] if later else batch["start_ms"] + batch["duration_ms"] + 200
    return [w for w in run.workers if batch["start_ms"] <= w["at_ms"] < hi]


def worker_totals(run: Run, batch: dict) -> dict[str, float]:
    """Ballast's worker steps of ``batch`` (:func:`batch_steps`): records, engine time, the state
    after the last step of each worker."""
    mine = batch_steps(run, batch)
    last: dict[int, dict] = {}
    for w in sorted(mine, key=lambda w: w["at_ms"]):
        last[w["worker"]] = w
    return {
        "records": sum(w["records"] for w in mine),
        "busy_ms": round(sum(w["busy_ms"] for w in mine), 1),
        "busiest_ms": round(max((w["busy_ms"] for w in mine), default=0.0), 1),
        "state_keys": sum(w["state_keys"] for w in last.values()),
        "state_bytes": sum(w["state_bytes"] for w in last.values()),
        "workers": len(last),
        "late": sum(w["late"] for w in mine),
    }


def slim(batch: dict) -> dict:
    """A batch row as the report keeps it (the state operators' main figures only)."""
    out = {k: v for k, v in batch.items() if k != "state"}
    out["state"] = [
        {
            **{k: v for k, v in op.items() if k != "customMetrics"},
            **{k: v for k, v in (op.get("customMetrics") or {}).items() if k in KEPT_CUSTOM},
        }
        for op in batch.get("state", ())
    ]
    return out


def summarize_run(r: Run, warmup: int, cap: int) -> dict[str, Any]:
    st = steady(r.batches, warmup, cap)
    rows = sum(b["rows"] for b in st)
    ms = sum(b["duration_ms"] for b in st)
    cpu: dict[str, float] = {}
    for b in st:
        for k, v in b.get("cpu_s", {}).items():
            cpu[k] = cpu.get(k, 0.0) + v
    ops = [b["state"][0] for b in st if b.get("state")]
    out: dict[str, Any] = {
        "contender": r.contender,
        "round": r.round,
        "job": r.job,
        "startup_s": round(r.startup_s, 1),
        "batches": len(r.batches),
        "steady_batches": len(st),
        "records": rows,
        "records_per_s": round(rows / (ms / 1000), 1) if ms else 0.0,
        "batch_p50_ms": round(pct([b["duration_ms"] for b in st], 50)),
        "batch_p99_ms": round(pct([b["duration_ms"] for b in st], 99)),
        "cpu_s_per_batch": {k: round(v / len(st), 2) for k, v in sorted(cpu.items())} if st else {},
        "cpu_us_per_record": round(sum(cpu.values()) / rows * 1e6, 1) if rows else None,
        "add_batch_p50_ms": round(pct([b["durations"].get("addBatch", 0) for b in st], 50)),
        "state_updates_ms_p50": round(pct([op.get("allUpdatesTimeMs") or 0 for op in ops], 50)),
        "state_commit_ms_p50": round(pct([op.get("commitTimeMs") or 0 for op in ops], 50)),
    }
    if r.contender == "ballast" and st:
        totals = [worker_totals(r, b) for b in st]
        records = sum(t["records"] for t in totals)
        out["engine_ms_per_batch_p50"] = round(pct([t["busy_ms"] for t in totals], 50))
        out["engine_us_per_record"] = (
            round(sum(t["busy_ms"] for t in totals) * 1000 / records, 2) if records else None
        )
        out["state_keys_p50"] = round(pct([t["state_keys"] for t in totals], 50))
        out["late_records"] = sum(worker_totals(r, b)["late"] for b in r.batches)
    return out


def check_run(r: Run, backlog: Backlog, ref: Any, window_ms: int) -> dict[str, Any]:
    """The run's windows against the reference of the windows its last watermark closed (Ballast's:
    each key's worker's own last watermark; its query declares none to Spark)."""
    assert r.results is not None
    if r.workers:
        per_key, watermark = worker_watermarks(r.results, r.workers)
        expected = closed_reference(ref, backlog.events, window_ms, watermark, per_key)
    else:
        watermark = max((b["watermark_ms"] for b in r.batches), default=0)
        expected = closed_reference(ref, backlog.events, window_ms, watermark)
    return {"watermark_ms": watermark, **compare(r.results, expected)}


def rounds_order(contenders: list[str], rnd: int) -> list[str]:
    """The contenders in the order of round ``rnd`` (turned by one each round)."""
    k = rnd % len(contenders)
    return contenders[k:] + contenders[:k]


def run_distribution(
    name: str, z: float, params: Params, kafka: KafkaConfig, workdir: Path, started: float
) -> dict[str, Any]:
    """Every round of every contender on one backlog."""
    contenders = [c for c in params.tp_contenders.split(",") if c]
    unknown = set(contenders) - set(CONTENDERS)
    if unknown:
        raise ValueError(f"unknown contenders {sorted(unknown)} (known: {', '.join(CONTENDERS)})")
    window = params.tp_window_ms
    events = keyed_events(params.tp_events, params.tp_keys, z, params.seed, PER_MS, default_start_ms(window))
    backlog = fill(kafka, workdir, f"tp-{name}", events)
    ref = reference(events, window)
    s = settings(params, params.tp_cap)
    runs: list[dict[str, Any]] = []
    batches: dict[str, list[dict]] = {}
    pairs: list[dict[str, Any]] = []
    try:
        for rnd in range(params.tp_rounds):
            done: dict[str, Run] = {}
            for contender in rounds_order(contenders, rnd):
                r = run(contender, backlog, rnd, s, workdir)
                summary = summarize_run(r, params.tp_warmup_batches, params.tp_cap)
                summary["check"] = check_run(r, backlog, ref, window)
                runs.append(summary)
                batches[r.job] = [slim(b) for b in r.batches]
                done[contender] = r
                log(
                    f"{name} round {rnd + 1}/{params.tp_rounds} {contender}: "
                    f"{summary['records_per_s']:,.0f} records/s, batch p50 {summary['batch_p50_ms']} ms, "
                    f"p99 {summary['batch_p99_ms']} ms, CPU {summary['cpu_us_per_record']} µs/record, "
                    f"check {'ok' if equal(summary['check']) else summary['check']} "
                    f"({time.monotonic() - started:.0f} s)"
                )
            pairs.append(pair_round(rnd, done, runs))
            for r in done.values():
                r.results = None  # the outputs were compared; free them
    finally:
        backlog.close()
    return {
        "z": z,
        "events": backlog.records,
        "routed_offsets": backlog.offsets,
        "routing_s": round(backlog.routed_s, 1),
        "contenders": pooled(runs, batches, params),
        "rounds": pairs,
        "runs": runs,
        "batches": batches,
    }


# each paired with every native query
SUBJECTS = ("ballast", "partition-stage", "partition-stage-direct", "partition-stage-eos")


def pair_round(rnd: int, done: dict[str, Run], runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Each subject (Ballast, the partition stage) ÷ each native query in one round: records/s,
    and the windows compared one by one."""
    rates = {s["contender"]: s["records_per_s"] for s in runs if s["round"] == rnd}
    out: dict[str, Any] = {"round": rnd, "records_per_s": rates}
    for subject in SUBJECTS:
        mine = done.get(subject)
        if mine is None:
            continue
        for name, other in done.items():
            if name in SUBJECTS:
                continue
            if rates.get(name):
                out[f"{subject}_over_{name}"] = round(rates[subject] / rates[name], 3)
            if mine.results is not None and other.results is not None:
                theirs, _repeated = latest(other.results)
                out[f"{subject}_vs_{name}_windows"] = compare(
                    mine.results, theirs[["count", "sum", "min", "max"]]
                )
    return out


def pooled(runs: list[dict[str, Any]], batches: dict[str, list[dict]], params: Params) -> dict[str, Any]:
    """Per contender, over its rounds: records/s (median and each round), batch p50/p99 over every
    steady batch of every round, CPU per record."""
    out: dict[str, Any] = {}
    for contender in dict.fromkeys(s["contender"] for s in runs):
        mine = [s for s in runs if s["contender"] == contender]
        durations = [
            b["duration_ms"]
            for s in mine
            for b in steady(batches[s["job"]], params.tp_warmup_batches, params.tp_cap)
        ]
        rates = [s["records_per_s"] for s in mine]
        cpu = [s["cpu_us_per_record"] for s in mine if s["cpu_us_per_record"]]
        row: dict[str, Any] = {
            "label": CONTENDERS[contender],
            "rounds": len(mine),
            "records_per_s_median": round(statistics.median(rates), 1) if rates else 0.0,
            "records_per_s": rates,
            "batch_p50_ms": round(pct(durations, 50)),
            "batch_p99_ms": round(pct(durations, 99)),
            "steady_batches": len(durations),
            "cpu_us_per_record_median": round(statistics.median(cpu), 1) if cpu else None,
            "cpu_s_per_batch_median": _median_dicts(s["cpu_s_per_batch"] for s in mine),
            "checks_ok": all(equal(s["check"]) for s in mine),
        }
        if contender == "ballast":
            engine = [s["engine_us_per_record"] for s in mine if s.get("engine_us_per_record")]
            row["engine_us_per_record_median"] = round(statistics.median(engine), 2) if engine else None
        out[contender] = row
    return out


def _median_dicts(dicts: Iterable[dict[str, float]]) -> dict[str, float]:
    rows = list(dicts)
    keys = sorted({k for d in rows for k in d})
    return {k: round(float(np.median([d.get(k, 0.0) for d in rows])), 2) for k in keys}


def ratio_summary(dists: dict[str, Any]) -> dict[str, Any]:
    """Per distribution and native contender: the paired ratios of every round and their median."""
    out: dict[str, Any] = {}
    for name, d in dists.items():
        for key in sorted({k for p in d["rounds"] for k in p if "_over_" in k}):
            values = [p[key] for p in d["rounds"] if key in p]
            out[f"{name}_{key}"] = {"rounds": values, "median": round(statistics.median(values), 3)}
    return out


def run_throughput(params: Params, kafka: KafkaConfig, workdir: Path, started: float) -> dict[str, Any]:
    """The throughput part: every distribution, the report."""
    zs = {"uniform": 0.0, "zipf": params.tp_zipf}
    dists: dict[str, Any] = {}
    for name in [d for d in params.tp_dists.split(",") if d]:
        if name not in zs:
            raise ValueError(f"unknown key distribution {name!r} (uniform, zipf)")
        log(f"throughput, {name} keys: {params.tp_events:,} events over {params.tp_keys:,} keys")
        dists[name] = run_distribution(name, zs[name], params, kafka, workdir, started)
    return {
        "params": asdict(params),
        "workers": WORKERS,
        "spark_master": f"local[{params.tp_cores}]",
        "elapsed_s": round(time.monotonic() - started),
        "notes": {
            "records_per_s": "Kafka records read / sum of the steady batches' triggerExecution (warm-up "
            "and batches under 90 % of the cap left out)",
            "batch": "triggerExecution of the steady batches, every round pooled",
            "ratio": "Ballast's (or the partition stage's) records/s ÷ the native query's, same round, "
            "same backlog",
            "cpu": "CPU seconds of the contender's own processes (driver, JVM, Python workers) over the "
            "steady batches, from /proc",
            "check": "windows closed by the run's last watermark, against the reference and against "
            "each other, count/sum/min/max/mean equal",
        },
        "ratios": ratio_summary(dists),
        "distributions": dists,
    }


def print_summary(report: dict[str, Any]) -> None:
    print()
    print(
        f"{'keys':<9}{'contender':<42}{'rec/s (median)':>15}{'p50 s':>8}{'p99 s':>8}"
        f"{'CPU µs/rec':>12}{'ok':>5}"
    )
    for name, d in report["distributions"].items():
        for c in d["contenders"].values():
            print(
                f"{name:<9}{c['label']:<42}{c['records_per_s_median']:>15,.0f}"
                f"{c['batch_p50_ms'] / 1000:>8.2f}"
                f"{c['batch_p99_ms'] / 1000:>8.2f}{c['cpu_us_per_record_median'] or 0:>12.1f}"
                f"{'yes' if c['checks_ok'] else 'NO':>5}"
            )
    for key, v in report["ratios"].items():
        print(f"  {key}: {v['rounds']} (median {v['median']})")
