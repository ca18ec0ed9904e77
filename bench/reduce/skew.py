"""Skew: per-key CPU work under a drifting Zipf hot set, Ballast against Spark's best per-key query.

The question: for per-key work that Spark cannot pre-aggregate, is Ballast faster than the query
a Spark expert writes, given the same task slots? The peers are ``groupBy(key)`` with
``transformWithStateInPandas`` or ``applyInPandasWithState`` (:mod:`bench.reduce.peer`) at P = S,
4S and 8S shuffle partitions (over-partitioning is Spark's own skew remedy), Ballast the reduce
job, hash only, with 8 workers (8 routed partitions, so 8 tasks on the same S slots) and with
S = 2 (``ballast-2w``, a backlog routed into 2 partitions): Ballast's configurations are
compared as Spark's are, the best of each. Each runs the same processor with the same simulated
cost per record (``--sk-cost-kind cpu``: a spin on the task thread's CPU clock,
standing for per-key computation; ``sleep`` stands for blocking I/O).

Per skew (Zipf z) and seed, one backlog (:func:`bench.reduce.backlog.drifting_events`: the hot
set moves ``sk_phases`` times) is routed once; every contender reads it from the start, one at a
time, the order turning by one each seed (*drain*). Figures as in :mod:`bench.reduce.throughput`:
records/s over the steady batches at the cap (a backlog drained at this rate is the rate the
contender sustains with its lag bounded by one batch), batch p50/p99, CPU µs per record, every run
checked against the reference. The first 10 batches are left out: the JVM compiles Spark's code
over them. Ratios, per skew: Ballast ÷ the best peer of the same seed, and their median over the
seeds. For Ballast, the busiest worker's share of a batch's records against the bound
max(1/workers, the hottest key's share): the part of a batch no placement can spread.

Then *paced* (:mod:`bench.reduce.paced`): Ballast, Ballast with routing updates
(``ballast-routed``) and the best peer of the seed, each fed the same
events live at one rate (80 % of that peer's drained rate), each record's latency to the end of
the batch that read it; Ballast's p99 ÷ the peer's. A drained backlog is gentler than a live
stream in one way the paced runs are not: Spark's Kafka source splits a capped batch across the
partitions by their whole backlog, so every batch carries each worker's average share, not the
current phase's.

``--sk-from`` keeps the runs of an earlier report of the same backlogs and adds this run's (a
contender's runs of a mode that runs again are replaced), so a part can be completed without
running it all again. Hash-only routing places keys as Spark's shuffle does (a hash mod the
partitions), so ``ballast-2w`` against the peer at P = S separates Ballast's engine from placement.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import pandas as pd

from ballast.harness.events import Events
from ballast.kafka.configuration import KafkaConfig
from ballast.workload import zipf_probabilities
from bench.reduce.backlog import Backlog, default_start_ms, drifting_events, fill, reference
from bench.reduce.check import equal
from bench.reduce.figures import pct
from bench.reduce.paced import latency_summary, record_latencies, routed_stamps, start_paced
from bench.reduce.params import PER_MS, WORKERS, Params, log
from bench.reduce.progress import offsets_read
from bench.reduce.runs import BALLAST, CONTENDERS, PEERS, RunSettings, run, workers_of
from bench.reduce.throughput import (
    check_run,
    rounds_order,
    settings,
    slim,
    steady,
    summarize_run,
)


def busiest_shares(batches: list[dict], warmup: int, cap: int) -> list[float]:
    """Per steady batch of a Ballast run: the busiest worker's share of the batch's records, from
    the routed offsets each batch read (routed partition p is worker p; the router's markers, 0.01 %
    of the records, count with them)."""
    out = []
    keep = {b["id"] for b in steady(batches, warmup, cap)}
    for b, ranges in offsets_read(batches):
        read = [hi - lo for _, lo, hi in ranges]
        if b["id"] in keep and sum(read):
            out.append(max(read) / sum(read))
    return out


@dataclass(frozen=True)
class SeedJob:
    """What every run of one (z, seed) shares: its events, their reference, the run settings."""

    z: float
    seed_index: int
    seed: int
    name: str  # of its deployments
    events: Events
    ref: pd.DataFrame  # bench.reduce.backlog.reference of the events
    settings: RunSettings

    def head(self, params: Params, contender: str) -> str:
        return f"skew z={self.z:g} seed {self.seed_index + 1}/{params.sk_seeds} {contender}"


def run_seed(
    z: float,
    seed_index: int,
    params: Params,
    kafka: KafkaConfig,
    workdir: Path,
    started: float,
    earlier: list[dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """Every contender once on the backlog of one (z, seed) (drain), then Ballast and the best
    peer fed the same events live at one fixed rate (paced); ``earlier``: this (z, seed)'s drained
    runs of an earlier report (the paced rate may come from its peers)."""
    window = params.tp_window_ms
    seed = params.seed + 1000 * seed_index
    events = drifting_events(
        params.sk_events, params.sk_keys, z, seed, PER_MS, default_start_ms(window), params.sk_phases
    )
    job = SeedJob(
        z=z,
        seed_index=seed_index,
        seed=seed,
        name=f"sk-z{z:g}-s{seed_index}".replace(".", "_"),
        events=events,
        ref=reference(events, window),
        settings=replace(
            settings(params, params.sk_cap),
            record_cost_us=params.sk_cost_us,
            record_cost_kind=params.sk_cost_kind,
        ),
    )
    out = drain_runs(job, params, kafka, workdir, started) if "drain" in modes(params) else []
    if "paced" in modes(params):
        fresh = {r["contender"] for r in out}
        drained = out + [r for r in earlier or [] if r["contender"] not in fresh]
        out += paced_runs(job, params, kafka, workdir, started, drained)
    return out


def drain_runs(
    job: SeedJob, params: Params, kafka: KafkaConfig, workdir: Path, started: float
) -> list[dict[str, Any]]:
    """Every contender of ``sk_contenders`` draining the routed backlog at the cap, one at a time
    (a backlog per worker count among them)."""
    chosen = contenders(params.sk_contenders)
    window = params.tp_window_ms
    out: list[dict[str, Any]] = []
    backlogs: dict[int, Backlog] = {}
    try:
        for w in sorted({workers_of(c) for c in chosen}, reverse=True):
            name = job.name if w == WORKERS else f"{job.name}-w{w}"
            backlogs[w] = fill(kafka, workdir, name, job.events, w)
        for contender in rounds_order(chosen, job.seed_index):
            backlog = backlogs[workers_of(contender)]
            r = run(contender, backlog, job.seed_index, job.settings, workdir)
            summary = summarize_run(r, params.sk_warmup_batches, params.sk_cap)
            summary["mode"], summary["z"], summary["seed"] = "drain", job.z, job.seed
            summary["check"] = check_run(r, backlog, job.ref, window)
            if contender in BALLAST:
                shares = busiest_shares(r.batches, params.sk_warmup_batches, params.sk_cap)
                summary["busiest_worker_share_p50"] = round(pct(shares, 50), 3) if shares else None
            summary["batches_kept"] = [slim(b) for b in r.batches]
            out.append(summary)
            log(
                f"{job.head(params, contender)}: "
                f"{summary['records_per_s']:,.0f} records/s, batch p50 {summary['batch_p50_ms']} ms, "
                f"p99 {summary['batch_p99_ms']} ms, CPU {summary['cpu_us_per_record']} µs/record, "
                f"check {'ok' if equal(summary['check']) else summary['check']} "
                f"({time.monotonic() - started:.0f} s)"
            )
    finally:
        for backlog in backlogs.values():
            backlog.close()
    return out


def paced_runs(
    job: SeedJob,
    params: Params,
    kafka: KafkaConfig,
    workdir: Path,
    started: float,
    drained: list[dict[str, Any]],
) -> list[dict[str, Any]]:
    """The paced contenders (:func:`paced_plan`, from the ``drained`` runs of this seed), each fed
    the events live on a deployment of its own."""
    rate, paced = paced_plan(params, drained)
    out: list[dict[str, Any]] = []
    for contender in rounds_order(paced, job.seed_index):
        routing = routing_settings(params) if contender == "ballast-routed" else None
        backlog = start_paced(
            kafka, workdir, f"{job.name}-{contender}", job.events, rate, routing, workers_of(contender)
        )
        try:
            r = run(contender, backlog, job.seed_index, job.settings, workdir)
            backlog.wait_fed()
            stamps = routed_stamps(backlog.pipe)
            warm_until = backlog.paced_from_ms + int(params.sk_paced_warm_s * 1000)
            _, lats = record_latencies(r.batches, stamps, warm_until)
            summary = {"contender": contender, "mode": "paced", "z": job.z, "seed": job.seed, "rate": rate,
                       **latency_summary(lats), "check": check_run(r, backlog, job.ref, params.tp_window_ms),
                       "batches_kept": [slim(b) for b in r.batches]}  # fmt: skip
            if r.workers:  # the routing updates the workers applied (0: hash only)
                summary["epochs"] = max(w["epoch"] for w in r.workers)
        finally:
            backlog.close()
        out.append(summary)
        verdict = "ok" if equal(summary["check"]) else summary["check"]
        log(
            f"{job.head(params, contender)} paced at {rate:,.0f}/s: "
            f"latency p50 {summary['latency_p50_ms']} ms, p99 {summary['latency_p99_ms']} ms, "
            f"drift {summary['drift_ms']} ms, check {verdict} ({time.monotonic() - started:.0f} s)"
        )
    return out


def routing_settings(params: Params) -> dict[str, Any]:
    """The controller loop of the ``ballast-routed`` contender, as the demo runs it: a plan once
    max/mean worker load stays over 1 + theta for 2 intervals, sent at once."""
    return {
        "heavy_hitters_top": params.heavy_hitters,
        "interval_s": params.sk_routing_interval_s,
        "theta": params.theta,
        "plan_theta": round(params.theta / 3, 4),
        "pricing": "records",
        "consecutive": 2,
        "min_gap": 1,
        "forecast": False,
        "pacing": "all-at-once",
        "step_timeout_s": 60,
    }


def modes(params: Params) -> list[str]:
    chosen = [m for m in params.sk_modes.split(",") if m]
    unknown = set(chosen) - {"drain", "paced"}
    if unknown or not chosen:
        raise ValueError(f"--sk-modes: drain, paced or both, not {params.sk_modes!r}")
    return chosen


def contenders(names: str) -> list[str]:
    chosen = [c for c in names.split(",") if c]
    unknown = set(chosen) - set(CONTENDERS)
    if unknown:
        raise ValueError(f"unknown contenders {sorted(unknown)} (known: {', '.join(CONTENDERS)})")
    return chosen


def paced_plan(params: Params, drained: list[dict[str, Any]]) -> tuple[float, list[str]]:
    """The paced runs of one seed: the rate (``sk_paced_rate``, or ``sk_paced_fraction`` of the
    best peer's drained rate) and the contenders (``best`` standing for that peer)."""
    peers = {r["contender"]: r["records_per_s"] for r in drained if r["contender"] in PEERS}
    best = max(peers, key=peers.__getitem__) if peers else None
    rate = params.sk_paced_rate or (params.sk_paced_fraction * peers[best] if best else 0.0)
    wanted = [c for c in params.sk_paced_contenders.split(",") if c]
    if rate <= 0 or ("best" in wanted and best is None):
        raise ValueError(
            "paced runs need the drained runs of a peer (--sk-modes drain,paced) or both "
            "--sk-paced-rate and --sk-paced-contenders naming no 'best'"
        )
    return round(rate, 1), contenders(",".join(dict.fromkeys(best if c == "best" else c for c in wanted)))


def skew_summary(z: float, runs: list[dict[str, Any]], cores: int, keys: int) -> dict[str, Any]:
    """One skew's table: per contender the median rate, p50/p99, CPU per record; Ballast ÷ the
    best peer of each seed, and the bound on the busiest worker; the paced runs' latency, and
    Ballast's p99 ÷ the peer's of the same seed (≤ 1: no worse)."""
    paced = [r for r in runs if r.get("mode") == "paced"]
    runs = [r for r in runs if r.get("mode", "drain") == "drain"]
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
        hottest = float(zipf_probabilities(keys, z)[0]) if z > 0 else 1.0 / keys
        if contender in BALLAST:
            shares = [r["busiest_worker_share_p50"] for r in mine if r.get("busiest_worker_share_p50")]
            rows[contender]["workers"] = workers_of(contender)
            rows[contender]["busiest_share_bound"] = round(max(1.0 / workers_of(contender), hottest), 4)
            if shares:
                rows[contender]["busiest_worker_share_median"] = round(statistics.median(shares), 3)
    ratios, best_of_ballast = [], []
    for seed in dict.fromkeys(r["seed"] for r in runs):
        of_seed = {r["contender"]: r["records_per_s"] for r in runs if r["seed"] == seed}
        peers = {c: v for c, v in of_seed.items() if c in PEERS}
        if not peers or max(peers.values()) <= 0:
            continue
        best = max(peers, key=peers.__getitem__)
        mine = {c: v for c, v in of_seed.items() if c in BALLAST}
        for subject, rate in mine.items():
            ratio = round(rate / peers[best], 3)
            ratios.append({"seed": seed, "subject": subject, "best_peer": best, "ratio": ratio})
        if mine:
            best_of_ballast.append(round(max(mine.values()) / peers[best], 3))
    hottest = float(zipf_probabilities(keys, z)[0]) if z > 0 else 1.0 / keys
    plain = [r["ratio"] for r in ratios if r["subject"] == "ballast"]
    return {
        "z": z,
        "contenders": rows,
        **paced_summary(paced),
        "ballast_over_best_peer": ratios,
        "ballast_over_best_peer_median": round(statistics.median(plain), 3) if plain else None,
        # Ballast's best configuration of the seed against the peers' best, as the peers are chosen
        "best_ballast_over_best_peer_median": (
            round(statistics.median(best_of_ballast), 3) if best_of_ballast else None
        ),
        "hottest_key_share": round(hottest, 4),
        "busiest_share_bound": round(max(1.0 / WORKERS, hottest), 4),
        "slot_share": round(1.0 / cores, 4),
    }


def paced_summary(paced: list[dict[str, Any]]) -> dict[str, Any]:
    """Per contender of the paced runs: the rate, medians of latency p50/p99 and drift over the
    seeds; per seed, Ballast's p99 ÷ the peer's it ran against."""
    rows: dict[str, Any] = {}
    for contender in dict.fromkeys(r["contender"] for r in paced):
        mine = [r for r in paced if r["contender"] == contender and r["records"]]
        if not mine:
            continue
        rows[contender] = {
            "label": CONTENDERS[contender],
            "rates": [r["rate"] for r in mine],
            **{
                f"{k}_median": round(statistics.median(r[k] for r in mine))
                for k in ("latency_p50_ms", "latency_p99_ms", "drift_ms")
            },
            "checks_ok": all(equal(r["check"]) for r in mine),
        }
        if any("epochs" in r for r in mine):
            rows[contender]["epochs"] = [r.get("epochs") for r in mine]
    ratios = []
    for seed in dict.fromkeys(r["seed"] for r in paced):
        p99 = {r["contender"]: r["latency_p99_ms"] for r in paced if r["seed"] == seed and r["records"]}
        peers = [c for c in p99 if c in PEERS]
        for subject in (c for c in BALLAST if c in p99):
            if peers and p99[peers[0]]:
                ratio = round(p99[subject] / p99[peers[0]], 3)
                ratios.append({"seed": seed, "subject": subject, "peer": peers[0], "ratio": ratio})
    plain = [r["ratio"] for r in ratios if r["subject"] == "ballast"]
    median = round(statistics.median(plain), 3) if plain else None
    return {"paced": rows, "ballast_p99_over_peer": ratios, "ballast_p99_over_peer_median": median}


def earlier_runs(params: Params) -> list[dict[str, Any]]:
    """The runs of ``sk_from`` (an earlier report of this part), checked to be of the same backlogs
    and costs (the events follow from the parameters compared here)."""
    if not params.sk_from:
        return []
    report = json.loads(Path(params.sk_from).read_text())
    theirs = report["params"]
    same = ("seed", "sk_events", "sk_keys", "sk_phases", "sk_cost_us", "sk_cost_kind", "tp_window_ms")
    differ = [k for k in same if theirs.get(k) != getattr(params, k)]
    if differ:
        raise ValueError(f"{params.sk_from} ran other backlogs or costs: {', '.join(differ)} differ")
    runs = report["runs"]
    for r in runs:
        r.setdefault("mode", "drain")
        if r["contender"] in BALLAST and r["mode"] == "drain":  # from the offsets, as this version reads it
            shares = busiest_shares(r["batches_kept"], theirs["sk_warmup_batches"], theirs["sk_cap"])
            r["busiest_worker_share_p50"] = round(pct(shares, 50), 3) if shares else None
    return runs


def merged(earlier: list[dict[str, Any]], fresh: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``earlier`` runs but those of a (mode, contender) that ``fresh`` ran again, then ``fresh``."""
    again = {(r["mode"], r["contender"]) for r in fresh}
    return [r for r in earlier if (r["mode"], r["contender"]) not in again] + fresh


def run_skew(params: Params, kafka: KafkaConfig, workdir: Path, started: float) -> dict[str, Any]:
    """The skew part: every skew, every seed, the report."""
    zs = [float(z) for z in params.sk_zipfs.split(",") if z]
    if "ballast-routed" in contenders(params.sk_contenders):
        raise ValueError("ballast-routed runs paced only (--sk-paced-contenders): a backlog is routed once")
    earlier = earlier_runs(params)
    if "drain" not in modes(params) and not earlier:
        paced_plan(params, [])  # a paced-only run names its rate and contenders, or an earlier report
    runs: list[dict[str, Any]] = []
    for z in zs:
        for i in range(params.sk_seeds):
            log(
                f"skew z={z:g}, seed {i + 1}/{params.sk_seeds}: "
                f"{params.sk_events:,} events, {params.sk_keys:,} keys"
            )
            seed = params.seed + 1000 * i
            mine = [r for r in earlier if r["z"] == z and r["seed"] == seed]
            drained = [r for r in mine if r["mode"] == "drain"]
            runs += merged(mine, run_seed(z, i, params, kafka, workdir, started, drained))
    done = {(r["z"], r["seed"]) for r in runs}
    runs = [r for r in earlier if (r["z"], r["seed"]) not in done] + runs
    zs = sorted({r["z"] for r in runs}) or zs
    return {
        "params": asdict(params),
        "slots": params.tp_cores,
        "workers": WORKERS,
        "spark_master": f"local[{params.tp_cores}]",
        "elapsed_s": round(time.monotonic() - started),
        # the report whose runs this one kept (sk_from): their parameters were that report's
        "kept_runs_of": params.sk_from or None,
        "notes": {
            "cost": f"{params.sk_cost_us} µs of {params.sk_cost_kind} per record at the stateful step, in "
            "every contender (cpu: a spin on the task thread's CPU clock, standing for per-key computation)",
            "records_per_s": "Kafka records read / sum of the steady batches' triggerExecution at the cap: "
            "the rate sustained with lag bounded by one batch",
            "ratio": "Ballast's records/s ÷ the best peer's of the same seed (same backlog, minutes apart)",
            "busiest_worker_share": "Ballast: the busiest worker's share of a steady batch's records; "
            "busiest_share_bound = max(1/workers, hottest key's share), slot_share = 1/S",
            "paced": "each contender fed the same events live at one rate (sk_paced_fraction of the best "
            "peer's drained rate unless sk_paced_rate): latency = end of the batch that read a record - "
            "its routed timestamp, records of the first sk_paced_warm_s left out; drift = p50 of the last "
            "quarter - p50 of the first (near 0: it kept up)",
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
              f"(median {sk['ballast_over_best_peer_median']}; "
              f"Ballast's best ÷ best peer {sk['best_ballast_over_best_peer_median']})")  # fmt: skip
        for c in sk["paced"].values():
            print(f"  paced at {c['rates']}/s, {c['label']}: latency p50 {c['latency_p50_ms_median']} ms, "
                  f"p99 {c['latency_p99_ms_median']} ms, drift {c['drift_ms_median']} ms, "
                  f"epochs {c.get('epochs')}, "
                  f"{'ok' if c['checks_ok'] else 'CHECK FAILED'}")  # fmt: skip
        if sk["ballast_p99_over_peer"]:
            print(f"  z={sk['z']:g} Ballast p99 ÷ peer p99 (paced): {sk['ballast_p99_over_peer']} "
                  f"(median {sk['ballast_p99_over_peer_median']})")  # fmt: skip
