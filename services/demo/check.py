"""The demo's check of the reduce against ground truth: pure, so a unit test drives it.

Ground truth is per key: with tumbling windows each record is in exactly one window, so the counts
of a key's windows add up to its records and their sums to the sum of its values. Every write is
read (not only the latest per window): a window written by two workers, or rewritten with another
value, is reported. The worker statistics say where each step ran and which moves were installed.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from ballast.metrics.records import ReduceProgress, WorkerStats
from services.demo.report import ReduceSummary

# Sums are doubles, and a key that moved has its sum merged from two partial sums (old owner's,
# new owner's), which can differ from the one-pass sum in the last bits; counts must be exact.
SUM_RTOL = 1e-6

Window = tuple[str, int, int]  # key, window start, window end
Write = tuple[int, int, float]  # worker, count, sum of one output record


def auto_watermark_delay(events: list[dict[str, Any]]) -> str:
    """Half the input's event-time span, in whole seconds (a Spark interval).

    Why half: the demo produces each half before (or while) the router routes it, so a routed
    partition can run ahead of another by at most one half's event times; with this delay no
    record is ever behind the watermark, whatever order the router reads the input partitions in.
    """
    times = [e["event_time"] for e in events]
    return f"{max(1, math.ceil((max(times) - min(times)) / 2000))} seconds"


def key_totals(events: Iterable[Mapping[str, Any]]) -> dict[str, tuple[int, float]]:
    """Ground truth: per key, its records and the exact sum of its values."""
    values: dict[str, list[float]] = defaultdict(list)
    for e in events:
        values[e["key"]].append(e["value"])
    return {k: (len(v), math.fsum(v)) for k, v in values.items()}


def batch_figures(s: ReduceSummary, progress: list[ReduceProgress]) -> None:
    """Micro-batches run, and their durations (every batch the job reported on the metrics topic)."""
    ran = {p.batch_id: p for p in progress}
    s.micro_batches = max(ran) + 1 if ran else 0
    s.batches = [[b, ran[b].input_rows, ran[b].durations_ms.get("triggerExecution", 0)] for b in sorted(ran)]
    durations = sorted(ms for _, _, ms in s.batches)
    if durations:
        s.batch_ms_median = durations[len(durations) // 2]
        s.batch_ms_max = durations[-1]


def check_reduce(
    s: ReduceSummary,
    expected: Mapping[str, tuple[int, float]],
    writes: Mapping[Window, list[Write]],
    stats: list[WorkerStats],
    dead: Mapping[str, int],
    moves: Mapping[str, tuple[int, int]],
    plan_epoch: int,
) -> None:
    """Fill ``s`` from the job's output, worker stats and dead letters.

    ``writes``: every output record by (key, window start, window end) as (worker, count, sum);
    ``moves``: each pinned key's (hash home, pinned worker).
    """
    s.windows = len(writes)
    s.rewritten_windows = sum(len(w) - 1 for w in writes.values())
    s.split_windows = sum(1 for w in writes.values() if len({worker for worker, _, _ in w}) > 1)
    counts: Counter[str] = Counter()
    sums: dict[str, list[float]] = defaultdict(list)
    for (key, _, _), w in writes.items():
        _, count, total = w[-1]  # a rewrite carries the window's final value again
        counts[key] += count
        sums[key].append(total)
    s.keys_expected = len(expected)
    s.keys_checked = sum(1 for k in expected if k in counts)
    s.unexpected_keys = sum(1 for k in counts if k not in expected and k != s.flush_key)
    s.count_mismatches = s.sum_mismatches = 0
    s.max_sum_error = 0.0
    for key, (n, total) in expected.items():
        if key not in counts:
            continue
        s.count_mismatches += counts[key] != n
        error = abs(math.fsum(sums[key]) - total) / max(abs(total), 1e-12)
        s.max_sum_error = max(s.max_sum_error, error)
        s.sum_mismatches += error > SUM_RTOL

    s.worker_steps = len(stats)
    s.late_records = sum(st.late_records for st in stats)
    s.misplaced_steps = sum(1 for st in stats if st.spark_partition != st.worker)
    s.duplicate_chunks = sum(st.duplicate_chunks for st in stats)
    s.held_records = sum(st.held_records for st in stats)
    last: dict[int, WorkerStats] = {}
    for st in stats:
        if st.worker not in last or st.step >= last[st.worker].step:
            last[st.worker] = st
    s.pending_keys = sum(st.pending_keys for st in last.values())
    installed = {(c.key, c.epoch, st.worker): c for st in stats for c in st.chunks_installed}
    s.chunks_sent = sum(len(st.chunks_sent) for st in stats)
    s.chunks_installed = len(installed)
    s.chunk_bytes = sum(c.bytes for c in installed.values())
    moved = {key for key, _, _ in installed}
    s.keys_moved = sorted(moved, key=lambda k: (-expected.get(k, (0, 0.0))[0], k))
    must_move = {k: (home, pinned) for k, (home, pinned) in moves.items() if home != pinned}
    s.moves_expected = len(must_move)
    s.moves_missing = sorted(
        k
        for k, (home, pinned) in must_move.items()
        if (c := installed.get((k, plan_epoch, pinned))) is None or c.worker != home
    )
    s.dead_letters = dict(dead)
