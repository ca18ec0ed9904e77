"""A phase of one placement: its slices released in lockstep with the query's batches.

Why lockstep: the next slice is released as soon as the checkpoint's offset log shows that the
batch covering the previous slice was planned, so every micro-batch holds one slice in every
placement and the query always has one slice of backlog (see the docstring of
:mod:`bench.reduce`). In (c) the planning round runs on the prefix while the prefix's batch runs.
"""

from __future__ import annotations

import time

from bench.reduce.params import log
from bench.reduce.placement import Placement
from bench.reduce.workload import Slice


def run_phase(pl: Placement, slices: list[Slice]) -> None:
    """Release a phase's slices into one placement, each as soon as the previous one's batch is planned."""
    t0 = time.monotonic()
    for s in slices:
        plan_from = int(time.time() * 1000)  # the router is idle: later statistics are this slice's
        ends = pl.release(s)
        what = f"phase {s.phase} {s.kind} {s.index}"
        pl.slice_batches[(s.phase, s.index)] = pl.planned_batch(ends, what)
        if s.index == 0 and pl.updates:
            info = pl.plan_update(s.phase, plan_from, len(s.records))
            log(
                f"{pl.label}: phase {s.phase} plan: {info['assign']} assigned, {info['unassign']} back "
                f"to hash, table {info['table']}, planned max/mean {info['planned_max_over_mean']}, "
                f"epoch {info['epoch']} announced {info['round_s']} s after the round began"
            )
    pl.drain()
    progress = pl.query.progress()
    durs = [
        progress[b].duration_ms / 1000
        for (ph, _i), b in pl.slice_batches.items()
        if ph == slices[0].phase and b in progress
    ]
    delays = pl.input.delays_s[-len(slices) :]
    log(
        f"{pl.label}: phase {slices[0].phase} done in {time.monotonic() - t0:.0f} s, "
        f"batches {[round(d, 1) for d in durs]} s, routing delays {[round(d, 2) for d in delays]} s"
    )
