"""Simulated per-record work at the stateful step (benchmarks), as a sleep or as CPU.

Why two kinds: a sleep stands for blocking I/O (an external call): the tasks of one batch sleep
side by side, so more tasks than cores still add capacity. CPU stands for computation (a per-key
model, parsing): it spins until the *thread's* CPU clock has advanced by the cost, so a task that
shares a core with another takes longer in wall time, as real computation does. Spinning on the
wall clock instead would let an oversubscribed task finish on time while using half the CPU, a
sleep in disguise.
"""

from __future__ import annotations

import time

COST_KINDS = ("sleep", "cpu")


def pay(seconds: float, kind: str = "sleep") -> None:
    """Spend ``seconds`` of simulated work of ``kind`` (``sleep`` or ``cpu``) in this thread."""
    if seconds <= 0:
        return
    if kind == "sleep":
        time.sleep(seconds)
        return
    if kind != "cpu":
        raise ValueError(f"unknown record cost kind {kind!r} (one of {', '.join(COST_KINDS)})")
    deadline = time.thread_time() + seconds
    x = 0
    while time.thread_time() < deadline:
        for i in range(200):  # some arithmetic between clock reads, so the clock is not the work
            x = (x * 31 + i) & 0xFFFF
