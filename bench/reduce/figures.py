"""The figures of a placement, from its classified batches.

Why full-slice batches only for durations and loads: they hold the same slice in every placement,
so they compare the same work; prefix, partial and chunk-only batches still count in records/s.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from bench.reduce.batches import Batch


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else 0.0


def summarize(label: str, records: int, batches: list[Batch]) -> dict:
    """Durations, throughput and per-worker load of one placement (``records``: the data records
    it was given)."""
    measured = [b for b in batches if b.kind != "warmup"]
    full = [b for b in measured if b.kind == "slice" and not b.split]
    durs = [b.duration_ms for b in full]
    total_ms = sum(b.duration_ms for b in measured)
    ratios = [max(b.worker_records) / np.mean(b.worker_records) for b in full if sum(b.worker_records)]
    return {
        "placement": label,
        "full_slice_batches": len(full),
        "batches": len(measured),
        "partial_batches": sum(1 for b in measured if b.kind == "partial"),
        "split_slices_left_out": sum(1 for b in measured if b.kind == "slice" and b.split),
        "extra_batches": sum(1 for b in measured if b.kind == "extra"),
        "warmup_ms": sum(b.duration_ms for b in batches if b.kind == "warmup"),
        "batch_p50_ms": round(pct(durs, 50)),
        "batch_p99_ms": round(pct(durs, 99)),
        "batch_max_ms": max(durs, default=0),
        "all_batches_p50_ms": round(pct([b.duration_ms for b in measured], 50)),
        "records": records,
        "batch_time_s": round(total_ms / 1000, 1),
        "records_per_s": round(records / (total_ms / 1000), 1) if total_ms else 0.0,
        "load_max_over_mean_mean": round(float(np.mean(ratios)), 3) if ratios else None,
        "load_max_over_mean_max": round(float(np.max(ratios)), 3) if ratios else None,
        "late_records": sum(b.late for b in measured),
        **busiest_worker(full),
    }


def busiest_worker(full: list[Batch]) -> dict:
    """The busiest worker's step time per batch (sleep + engine work; WorkerStats ``busy_ms``, so
    Ballast placements only) and the rest of the batch: Spark's part, which no placement changes."""
    busy = [max(b.worker_busy_ms) for b in full if b.worker_busy_ms and max(b.worker_busy_ms) > 0]
    if not busy:
        return {}
    rest = [b.duration_ms - max(b.worker_busy_ms) for b in full if b.worker_busy_ms]
    return {
        "busiest_worker_p50_ms": round(pct(busy, 50)),
        "busiest_worker_p99_ms": round(pct(busy, 99)),
        "batch_minus_busiest_p50_ms": round(pct(rest, 50)),
    }


def migration_latency(batches: list[Batch]) -> dict:
    """Acceptance 3 in (c): keys not being moved, while a migration is under way vs steady state.

    Compared within each phase (the machine's load drifts between phases):

    * duration: batches with a migration under way (chunks shipped / installed, records held)
      vs the phase's full-slice batches without;
    * flow latency p99 (records of keys not waiting for a chunk, append -> processing, max over
      workers): a record waits in the backlog while the previous batch runs, so a batch is
      *affected* when it or its predecessor had a migration under way; the reference is the
      phase's full-slice batches where neither had.
    """
    measured = [b for b in batches if b.kind != "warmup"]
    phases: list[dict] = []
    for phase in sorted({b.phase for b in measured if b.phase >= 0}):
        rows = [b for b in measured if b.phase == phase]
        full = [b for b in rows if b.kind == "slice" and not b.split]
        moving = [b for b in rows if b.kind != "prefix" and b.migrating]
        steady = [b for b in full if not b.migrating]
        prev = {b.id: p for p, b in zip([None, *measured[:-1]], measured, strict=True)}
        affected = [b for b in full if b.migrating or (prev[b.id] is not None and prev[b.id].migrating)]
        calm = [b for b in full if b not in affected]
        row: dict[str, Any] = {"phase": phase, "migration_batches": [b.id for b in moving]}
        if moving and steady:
            ref = float(np.median([b.duration_ms for b in steady]))
            row["steady_batch_ms"] = round(ref)
            row["migration_batch_ms"] = [b.duration_ms for b in moving]
            row["batch_duration_ratio"] = round(max(b.duration_ms for b in moving) / ref, 3)
        if affected and calm:
            ref = float(np.median([b.latency_p99_ms for b in calm]))
            row["steady_flow_latency_p99_ms"] = round(ref)
            row["affected_flow_latency_p99_ms"] = [round(b.latency_p99_ms) for b in affected]
            row["flow_latency_p99_ratio"] = round(max(b.latency_p99_ms for b in affected) / ref, 3)
        phases.append(row)
    dur = [p["batch_duration_ratio"] for p in phases if "batch_duration_ratio" in p]
    lat = [p["flow_latency_p99_ratio"] for p in phases if "flow_latency_p99_ratio" in p]
    return {
        "per_phase": phases,
        "batch_duration_ratio_max": max(dur, default=None),
        "batch_duration_ratio_median": round(float(np.median(dur)), 3) if dur else None,
        "flow_latency_p99_ratio_max": max(lat, default=None),
        "flow_latency_p99_ratio_median": round(float(np.median(lat)), 3) if lat else None,
        "target_ratio_max": 2.0,
    }
