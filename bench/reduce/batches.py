"""What happened in each micro-batch: its slice, its kind, and what every worker did in it.

Why classify: the figures compare the *same* slices across placements, so every batch is told
what it was — the batch planned for a slice, a warm-up, a partial read of a slice, or an extra
batch of chunks only — and only whole slices enter the duration percentiles.

Why worker figures are matched by time: a worker's ``WorkerStats`` (and (a)'s load rows) do not
name the micro-batch, but they are written while it runs, and the batches of one query never
overlap, so the batch whose run contains the record's time is the one.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from bench.reduce.params import WORKERS
from bench.reduce.progress import BatchProgress


@dataclass(frozen=True)
class WorkerSample:
    """One worker's step (Ballast: ``WorkerStats``) or one key's call ((a): a load row), and when."""

    at_ms: int
    worker: int  # the reduce worker, or (a) the Spark partition
    records: int
    late: int = 0
    busy_ms: float = 0.0
    latency_p50_ms: float | None = None  # flow latency, only where the step had records
    latency_p99_ms: float | None = None
    chunks_sent: int = 0
    chunks_installed: int = 0
    held: int = 0
    pending: int = 0


@dataclass
class Batch:
    id: int
    start_ms: int
    duration_ms: int
    input_rows: int
    durations: dict[str, int]
    slice: tuple[int, int] | None = None  # (phase, index) of the slice it was planned for
    kind: str = "extra"  # warmup | prefix | slice | partial | extra (see classify)
    phase: int = -1
    split: bool = False  # the rest of a slice a ``partial`` batch began: not a whole slice
    worker_records: list[int] = field(default_factory=list)
    worker_busy_ms: list[float] = field(default_factory=list)
    latency_p99_ms: float = 0.0
    latency_p50_ms: float = 0.0
    chunks_sent: int = 0
    chunks_installed: int = 0
    held: int = 0
    pending: int = 0
    late: int = 0

    @property
    def migrating(self) -> bool:
        """A migration is under way in this batch: chunks shipped or installed, records held."""
        return bool(self.chunks_sent or self.chunks_installed or self.held or self.pending)


def classify(
    progress: dict[int, BatchProgress],
    samples: list[WorkerSample],
    slice_batches: dict[tuple[int, int], int],
) -> list[Batch]:
    """Every batch with its slice and per-worker figures.

    Kinds: ``warmup`` (before the first slice: the markers of the router's first assignment,
    and Spark's first-batch start-up), ``prefix`` / ``slice`` (the batch planned for that
    slice), ``partial`` (data of a slice read before the batch that completed it: an idle query
    can see the commit markers of some partitions before others), ``extra`` (no data: chunks
    written by the previous batch, or nothing).
    """
    by_slice = {b: s for s, b in slice_batches.items()}
    mapped = sorted(by_slice)
    out: list[Batch] = []
    for bid in sorted(progress):
        p = progress[bid]
        b = Batch(bid, p.start_ms, p.duration_ms, p.input_rows, dict(p.durations))
        if bid in by_slice:
            b.slice = by_slice[bid]
            b.kind = "prefix" if b.slice[1] == 0 else "slice"
            b.phase = b.slice[0]
        out.append(b)
    attach(out, samples)
    for b in out:
        if b.kind != "extra":
            continue
        if (not mapped or b.id < mapped[0]) and not sum(b.worker_records):
            b.kind = "warmup"
            continue
        later = [m for m in mapped if m > b.id]
        earlier = [m for m in mapped if m < b.id]
        if sum(b.worker_records) and later:
            b.kind, b.phase = "partial", by_slice[later[0]][0]
            next(x for x in out if x.id == later[0]).split = True
        elif earlier:
            b.phase = by_slice[earlier[-1]][0]
    return out


def attach(batches: list[Batch], samples: list[WorkerSample]) -> None:
    """Sum the samples into the batch that ran when each was written."""

    def batch_at(t: int) -> Batch | None:
        # batches of one query never overlap; the slack covers clock rounding (ms timestamps)
        for slack in (0, 200):
            for b in batches:
                if b.start_ms - slack <= t <= b.start_ms + b.duration_ms + slack:
                    return b
        return None

    records: dict[int, np.ndarray] = defaultdict(lambda: np.zeros(WORKERS, dtype=np.int64))
    busy: dict[int, np.ndarray] = defaultdict(lambda: np.zeros(WORKERS))
    lat99: dict[int, list[float]] = defaultdict(list)
    lat50: dict[int, list[float]] = defaultdict(list)
    for s in samples:
        b = batch_at(s.at_ms)
        if b is None or not 0 <= s.worker < WORKERS:
            continue
        records[b.id][s.worker] += s.records
        busy[b.id][s.worker] += s.busy_ms
        if s.latency_p99_ms is not None:
            lat99[b.id].append(s.latency_p99_ms)
        if s.latency_p50_ms is not None:
            lat50[b.id].append(s.latency_p50_ms)
        b.chunks_sent += s.chunks_sent
        b.chunks_installed += s.chunks_installed
        b.held += s.held
        b.pending = max(b.pending, s.pending)
        b.late += s.late
    for b in batches:
        b.worker_records = records[b.id].tolist()
        b.worker_busy_ms = [round(x, 1) for x in busy[b.id].tolist()]
        b.latency_p99_ms = max(lat99[b.id], default=0.0)
        b.latency_p50_ms = float(np.median(lat50[b.id])) if lat50[b.id] else 0.0
