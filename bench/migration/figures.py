"""One run's figures: micro-batches before, during and after the migration, and what it moved.

Definitions (pure functions of the batches, the workers' statistics and the log's story):

* **steady state**: the batches that started ``settle_s`` or more after the input began and ended
  before the migration's START; ``steady_p50_ms`` is their median duration.
* **during**: the batches that overlap [START, DONE] (started before DONE, ended after START).
  ``peak_ms`` is the longest of them, ``peak_over_steady`` its ratio to the steady p50.
* **after**: the batches that started after DONE and ended before the input stopped.
* **migration time**: START to DONE (or ABORT), the two events' times of issue in the log.
* **CPU per batch**: the CPU seconds the job's own processes (driver, JVM, Python workers) spent
  while the batch ran (``cpu_s``, sampled from ``/proc`` by :class:`bench.reduce.cpu.CpuSampler`):
  on a shared machine a batch's duration also measures everyone else's load, its CPU much less.
* **state moved**: the bytes of the state chunks the new owners installed for the migration's
  moves (key and step epoch; a chunk installed twice counts once), from ``WorkerStats``.

A batch's duration is Spark's ``triggerExecution`` (the job's ``ReduceProgress``).
"""

from __future__ import annotations

import statistics
from typing import Any

from bench.migration.story import step_epochs


def batch_rows(progress: list[dict[str, Any]], samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per batch (``progress``: id, start_ms, duration_ms, rows), with what its worker steps
    reported (``samples``, each given to the last batch that started before it was written):
    records, keys waiting for a chunk, chunks shipped and installed."""
    zero = dict.fromkeys(
        ("records", "pending_keys", "held_records", "chunks_sent", "chunks_installed", "installed_bytes"), 0
    )
    rows = [{**p, **zero, "busy_ms": 0.0} for p in sorted(progress, key=lambda p: p["start_ms"])]
    starts = [r["start_ms"] for r in rows]
    for s in samples:
        i = _last_before(starts, s["at_ms"])
        if i is None:
            continue
        r = rows[i]
        r["records"] += s["records"]
        r["busy_ms"] = round(r["busy_ms"] + s.get("busy_ms", 0.0), 1)
        r["pending_keys"] += s["pending_keys"]
        r["held_records"] += s["held_records"]
        r["chunks_sent"] += len(s["chunks_sent"])
        r["chunks_installed"] += len(s["chunks_installed"])
        r["installed_bytes"] += sum(c["bytes"] for c in s["chunks_installed"])
    return rows


def _last_before(starts: list[int], at: int) -> int | None:
    found = None
    for i, s in enumerate(starts):
        if s <= at:
            found = i
        else:
            break
    return found


def _ms(values: list[int], q: float) -> float | None:
    if not values:
        return None
    if q == 50:
        return float(statistics.median(values))
    ordered = sorted(values)
    return float(ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))])


def state_moved(story: dict[str, Any], samples: list[dict[str, Any]]) -> dict[str, int]:
    """Bytes and keys of the chunks installed for the migration's moves (each (key, epoch) once)."""
    wanted = step_epochs(story)
    seen: dict[tuple[str, int], int] = {}
    for s in samples:
        for c in s["chunks_installed"]:
            if wanted.get(c["key"]) == c["epoch"]:
                seen.setdefault((c["key"], c["epoch"]), int(c["bytes"]))
    return {"bytes": sum(seen.values()), "keys": len(seen)}


def mode_figures(
    rows: list[dict[str, Any]],
    story: dict[str, Any],
    samples: list[dict[str, Any]],
    feed_start_ms: int,
    feed_end_ms: int,
    settle_s: float,
) -> dict[str, Any]:
    start = story["start_ms"]
    end = story["end_ms"] if story["end_ms"] is not None else feed_end_ms

    def ends(r: dict[str, Any]) -> int:
        return r["start_ms"] + r["duration_ms"]

    steady = [r for r in rows if r["start_ms"] >= feed_start_ms + settle_s * 1000 and ends(r) <= start]
    during = [r for r in rows if r["start_ms"] < end and ends(r) > start]
    after = [r for r in rows if r["start_ms"] >= end and ends(r) <= feed_end_ms]
    d_steady = [r["duration_ms"] for r in steady]
    d_during = [r["duration_ms"] for r in during]
    d_after = [r["duration_ms"] for r in after]
    p50 = _ms(d_steady, 50)
    cpu = _cpu_figures(steady, during, after)
    peak = max(d_during) if d_during else None
    moved = state_moved(story, samples)
    epochs = [s["epoch"] for s in story["steps"]]
    return {
        "steady_batches": len(steady),
        "steady_p50_ms": p50,
        "steady_p95_ms": _ms(d_steady, 95),
        "steady_max_ms": max(d_steady) if d_steady else None,
        "during_batches": len(during),
        "peak_ms": peak,
        "during_p50_ms": _ms(d_during, 50),
        "peak_over_steady": round(peak / p50, 3) if peak is not None and p50 else None,
        "after_batches": len(after),
        "after_p50_ms": _ms(d_after, 50),
        "migration_s": round((end - start) / 1000, 2),
        "end_phase": story["end_phase"] or "in flight",
        "keys": story["keys"],
        "steps": len(story["steps"]),
        "epochs": [min(epochs), max(epochs)] if epochs else [],
        # every epoch of the log the migration took: START, its steps, STATE_SENT markers, DONE
        "log_epochs": story["end_epoch"] - story["start_epoch"] + 1 if story["end_epoch"] else None,
        "state_bytes_moved": moved["bytes"],
        "keys_installed": moved["keys"],
        "pending_keys_max": max((r["pending_keys"] for r in during), default=0),
        **cpu,
    }


def _cpu_figures(steady: list[dict], during: list[dict], after: list[dict]) -> dict[str, Any]:
    """CPU seconds per batch of the job's own processes (``cpu_s``, when sampled): steady p50, during
    p50 and max, after p50. Less sensitive than a batch's duration to the other work on the machine."""

    def cpu(rows: list[dict]) -> list[float]:
        return [r["cpu_s"] for r in rows if r.get("cpu_s") is not None]

    s, d, a = cpu(steady), cpu(during), cpu(after)
    p50 = float(statistics.median(s)) if s else None
    peak = max(d) if d else None
    return {
        "cpu_steady_p50_s": round(p50, 2) if p50 is not None else None,
        "cpu_during_p50_s": round(float(statistics.median(d)), 2) if d else None,
        "cpu_during_max_s": round(peak, 2) if peak is not None else None,
        "cpu_after_p50_s": round(float(statistics.median(a)), 2) if a else None,
        "cpu_during_over_steady": round(float(statistics.median(d)) / p50, 3) if d and p50 else None,
    }
