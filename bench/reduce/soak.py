"""Soak: Ballast's ``aggregate`` on Spark for many batches, every batch with keys never seen before.

What it shows: state follows the open windows, not the keys ever seen (user ids: well over a
million distinct keys, each alive in one stretch of event time), and the batch time stays flat
once the state holds every window it keeps.

The run: a backlog of ``batches x batch_records`` events, each stretch of ``batch_records`` over
``keys_per_batch`` new keys and ``batch_event_ms`` of event time (:mod:`bench.reduce.backlog`),
read by the reduce job (``ballast reduce run``, hash only) with the cap set to one stretch per
batch. Per batch: Spark's duration (progress), and from every worker's last ``WorkerStats`` in
the batch the state it keeps (rows = (key, window) pairs, and bytes), the engine's time and its
records.

Which windows a worker keeps: a window's rows stay until the watermark passes its end plus the
correction horizon (the job's default horizon is the watermark delay). So after a batch whose
watermark is W, the state should hold the windows that end after ``W - horizon`` and have begun
(start <= the latest event time read): its "retained windows", a number the backlog decides.

Verdict, after the warm-up (by default: until the state first holds a full retained span):
state rows per retained window, and bytes per row, of the last ``compare`` batches within
1.2x of the first ``compare`` batches after the warm-up; the same for batch duration (median of
each group). Also the windows written, checked against the reference.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ballast.kafka.configuration import KafkaConfig
from bench.reduce.backlog import default_start_ms, fill, fresh_key_events, reference
from bench.reduce.check import equal
from bench.reduce.params import WORKERS, Params, log
from bench.reduce.runs import run
from bench.reduce.throughput import check_run, settings, worker_totals

TARGET = 1.2


def delay_ms(interval: str) -> int:
    """A Spark interval of the benchmark's form ("10 seconds", "500 milliseconds") in ms."""
    value, unit = interval.split()
    return int(float(value) * (1000 if unit.startswith("second") else 1))


def retained_windows(watermark: int, latest: int, window_ms: int, horizon_ms: int) -> int:
    """Windows that began by ``latest`` and end after ``watermark - horizon``."""
    if latest <= 0:
        return 0
    first_end = watermark - horizon_ms  # windows ending after this are kept
    first_start = (first_end // window_ms) * window_ms  # the window ending just past it
    if first_start + window_ms <= first_end:
        first_start += window_ms
    last_start = (latest // window_ms) * window_ms
    return max(0, (last_start - first_start) // window_ms + 1)


def run_soak(params: Params, kafka: KafkaConfig, workdir: Path, started: float) -> dict[str, Any]:
    window = params.tp_window_ms
    events = fresh_key_events(
        params.soak_batches,
        params.soak_batch_records,
        params.soak_keys_per_batch,
        params.seed,
        params.soak_batch_event_ms,
        default_start_ms(window),
    )
    keys = params.soak_batches * params.soak_keys_per_batch
    log(f"soak: {events.ids.size:,} events, {keys:,} distinct keys, {params.soak_batches} batches")
    backlog = fill(kafka, workdir, "soak", events)
    ref = reference(events, window)
    try:
        r = run("ballast", backlog, 0, settings(params, params.soak_batch_records), workdir)
        check = check_run(r, backlog, ref, window)
    finally:
        backlog.close()
    horizon = delay_ms(params.watermark_delay)  # the job's default correction horizon
    rows: list[dict[str, Any]] = []
    for b in r.batches:
        t = worker_totals(r, b)
        retained = retained_windows(b["watermark_ms"], b["max_event_ms"], window, horizon)
        rows.append(
            {
                "id": b["id"],
                "rows": b["rows"],
                "duration_ms": b["duration_ms"],
                "watermark_ms": b["watermark_ms"],
                "retained_windows": retained,
                **t,
                "state_keys_per_window": round(t["state_keys"] / retained) if retained else None,
                "bytes_per_state_key": round(t["state_bytes"] / t["state_keys"], 1)
                if t["state_keys"]
                else None,
                "engine_us_per_record": round(t["busy_ms"] * 1000 / t["records"], 2)
                if t["records"]
                else None,
                "cpu_s": b.get("cpu_s", {}),
            }
        )
    verdict = judge(rows, params, window, horizon)
    log(f"soak: {verdict['summary']} ({time.monotonic() - started:.0f} s)")
    return {
        "params": asdict(params),
        "workers": WORKERS,
        "spark_master": f"local[{params.tp_cores}]",
        "elapsed_s": round(time.monotonic() - started),
        "events": int(events.ids.size),
        "distinct_keys": keys,
        "routing_s": round(backlog.routed_s, 1),
        "startup_s": round(r.startup_s, 1),
        "check": check,
        "check_ok": equal(check),
        "verdict": verdict,
        "batches": rows,
        "notes": {
            "state_keys": "rows kept by all workers after the batch: one per (key, window) "
            "(WorkerStats.state_keys of each worker's last step in the batch, summed)",
            "retained_windows": "windows begun by the batch's latest event time and ending after "
            "watermark - correction horizon: what the state should hold",
            "engine_us_per_record": "WorkerStats.busy_ms (the engine's step, state calls included) "
            "per data record, all workers",
        },
    }


def judge(rows: list[dict[str, Any]], params: Params, window_ms: int, horizon_ms: int) -> dict[str, Any]:
    """Early (after the warm-up) against late batches: state per retained window, bytes per row,
    batch duration."""
    full = [r for r in rows if r["rows"] >= 0.9 * params.soak_batch_records and r["workers"] == WORKERS]
    span = window_ms + delay_ms(params.watermark_delay) + horizon_ms  # event time a key's rows live
    warmup = params.soak_warmup_batches or math.ceil(span / params.soak_batch_event_ms) + 1
    after = [r for r in full if r["id"] >= warmup]
    n = params.soak_compare_batches
    if len(after) < 2 * n:
        return {"warmup_batches": warmup, "summary": f"too few batches after the warm-up ({len(after)})"}
    early, late = after[:n], after[-n:]

    def med(group: list[dict[str, Any]], key: str) -> float:
        return float(statistics.median(r[key] for r in group if r[key] is not None))

    out: dict[str, Any] = {"warmup_batches": warmup, "early_batches": [r["id"] for r in early]}
    out["late_batches"] = [r["id"] for r in late]
    ok = True
    for key in ("state_keys_per_window", "bytes_per_state_key", "duration_ms", "engine_us_per_record"):
        a, b = med(early, key), med(late, key)
        ratio = round(b / a, 3) if a else None
        out[key] = {"early": round(a, 2), "late": round(b, 2), "late_over_early": ratio}
        if key != "engine_us_per_record":
            ok = ok and ratio is not None and ratio <= TARGET
    out["state_keys_max"] = max(r["state_keys"] for r in rows)
    out["state_keys_per_worker_max"] = round(out["state_keys_max"] / WORKERS)
    out["flat"] = ok
    out["target"] = TARGET
    out["summary"] = (
        f"{'flat' if ok else 'NOT flat'}: late/early state per window "
        f"{out['state_keys_per_window']['late_over_early']}, bytes per row "
        f"{out['bytes_per_state_key']['late_over_early']}, "
        f"batch time {out['duration_ms']['late_over_early']} "
        f"(target <= {TARGET}); up to {out['state_keys_max']:,} state rows"
    )
    return out


def print_summary(report: dict[str, Any]) -> None:
    v = report["verdict"]
    print()
    print(
        f"soak: {report['events']:,} events, {report['distinct_keys']:,} keys, "
        f"{len(report['batches'])} batches"
    )
    print(f"  {v['summary']}")
    if "engine_us_per_record" in v:
        e = v["engine_us_per_record"]
        print(f"  engine µs/record early {e['early']}, late {e['late']}")
    print(f"  windows checked: {'ok' if report['check_ok'] else report['check']}")
