"""Seeded synthetic workloads: Zipf-distributed keys with payloads, as Avro input events, and the
*flush* event that closes every window behind them.

Why here and not in tests: the demo, the tests, the benchmarks and the planner's simulator
(:mod:`ballast.planner.workloads`) must all generate the same skewed traffic, and a seed makes
every run of them comparable. The Zipf distribution has this one home.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np


def zipf_probabilities(num_keys: int, z: float) -> np.ndarray:
    """P(rank i) proportional to 1 / i**z, i = 1..num_keys (z = 0 is uniform)."""
    ranks = np.arange(1, num_keys + 1, dtype=np.float64)
    weights = ranks ** (-z)
    return weights / weights.sum()


def zipf_key_ids(n: int, num_keys: int, z: float, seed: int) -> np.ndarray:
    """``n`` key ranks (0-based, 0 = hottest) drawn from a bounded Zipf(z) over ``num_keys`` keys."""
    rng = np.random.default_rng(seed)
    return rng.choice(num_keys, size=n, p=zipf_probabilities(num_keys, z))


def key_name(rank: int) -> str:
    return f"key-{rank:07d}"


FLUSH_KEY = "zz-flush"
# how far past the last event the flush event lies: beyond any watermark delay the demo, the tests
# and the benchmarks use, so the watermark it raises passes every window of the input
FLUSH_AHEAD_MS = 3_600_000


def flush_event(
    last_event_time: int, seq: int | None = None, ahead_ms: int = FLUSH_AHEAD_MS
) -> dict[str, Any]:
    """One event of its own key ``ahead_ms`` after ``last_event_time``.

    Why: a window closes when the reduce's watermark (the slowest input partition's event time,
    minus the delay) passes its end, and the last windows of a finite input would never close.
    Written into every input partition after everything else
    (:meth:`ballast.harness.pipeline.Pipeline.flush`), this event moves every partition past them.
    Its own window never closes, and it is not part of any ground truth. ``seq`` goes into the
    payload's first 8 bytes, like the sequence numbers of the events before it.

    ``ahead_ms``: just past the last window's end plus the watermark delay is enough. A router
    refuses an event further ahead of its clock than its ``--max-future-ms``: for input whose event
    time is the wall clock, use :func:`flush_now`.
    """
    payload = b"" if seq is None else int(seq).to_bytes(8, "big")
    event_time = last_event_time + ahead_ms
    return {"key": FLUSH_KEY, "value": 0.0, "payload": payload, "event_time": event_time}


def flush_now(last_event_time: int, ahead_ms: int, seq: int | None = None, now_ms: int | None = None) -> dict:
    """The flush event of :func:`flush_event`, but never ahead of ``now_ms`` (the wall clock): for
    input stamped with the wall clock, where a flush further ahead would be refused as ``future``.
    Sent again every few seconds, it passes the last window once the clock has."""
    import time

    now = int(time.time() * 1000) if now_ms is None else int(now_ms)
    return flush_event(last_event_time, seq, ahead_ms=max(0, min(ahead_ms, now - last_event_time)))


def closing_flush(last_event_time: int, window_ms: int, watermark_delay_ms: int) -> tuple[int, int]:
    """For a tumbling window: (the end of the last window, the ``ahead_ms`` of a flush event that
    closes it).

    Why just past the window's end plus the watermark delay, with a second to spare: that is the
    least that raises the watermark past the last window (see :func:`flush_event` for why more is
    worse). A caller waits until the job's watermark reaches the window's end.
    """
    last_window_end = (last_event_time // window_ms + 1) * window_ms
    return last_window_end, window_ms + watermark_delay_ms + 1_000


def input_events(
    n: int,
    num_keys: int = 10_000,
    z: float = 1.0,
    seed: int = 42,
    payload_bytes: int = 100,
    start_ms: int = 1_767_225_600_000,
    step_ms: int = 1,
) -> Iterator[dict[str, Any]]:
    """Avro ``InputEvent`` dicts; payloads are deterministic so a reader can check content."""
    ids = zipf_key_ids(n, num_keys, z, seed)
    rng = np.random.default_rng(seed + 1)
    values = np.round(rng.uniform(0.0, 100.0, size=n), 3)
    filler = bytes(range(256)) * (payload_bytes // 256 + 1)
    for i in range(n):
        tag = i.to_bytes(8, "big")
        yield {
            "key": key_name(int(ids[i])),
            "value": float(values[i]),
            "payload": tag + filler[: max(0, payload_bytes - 8)],
            "event_time": start_ms + i * step_ms,
        }
