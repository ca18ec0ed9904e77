"""The demo's input: a Zipf stream whose hot set shifts, with one overload burst, plus a file for
Kafka Connect. Pure: arrays and lines out, nothing produced here.

Why the shift is by scheduled time and not by wall time: the feeder produces the sequence at the
schedule's rates, so event ``i``'s scheduled time fixes which hot set it was drawn from, and a run
that is replayed draws the very same keys and values. The feeder stamps the real time of
production on each record (:mod:`ballast.harness.feed`), and the truth is computed from those.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from ballast.harness.events import Events
from ballast.harness.feed import Phase, scheduled_records
from ballast.workload import key_name, zipf_key_ids
from services.demo.settings import DemoSettings


@dataclass(frozen=True)
class DemoInput:
    """The stream's schedule and its events (times are filled in by the feeder)."""

    phases: list[Phase]
    events: Events
    shifts_s: list[float]  # scheduled times the hot set was drawn anew (0 included)
    burst_s: list[float]  # [start, end] of the burst ([] without one)


def schedule(s: DemoSettings) -> list[Phase]:
    """Calm, burst, calm again (without a burst: one calm phase)."""
    if not s.burst_s:
        return [Phase("calm", s.rate, s.input_s)]
    after = s.input_s - s.burst_at_s - s.burst_s
    phases = [Phase("calm", s.rate, s.burst_at_s), Phase("burst", s.rate * s.burst_factor, s.burst_s)]
    return [p for p in phases if p.seconds > 0] + ([Phase("recover", s.rate, after)] if after > 0 else [])


def scheduled_times(phases: list[Phase], n: int) -> np.ndarray:
    """Scheduled time (s since the start) of each of the first ``n`` events."""
    parts, start = [], 0.0
    for p in phases:
        count = int(p.rate * p.seconds)
        parts.append(start + np.arange(count) / p.rate)
        start += p.seconds
    times = np.concatenate(parts) if parts else np.zeros(0)
    if times.size < n:  # the sequence is a few events longer than the schedule (see scheduled_records)
        times = np.concatenate([times, np.full(n - times.size, start)])
    return times[:n]


def drifting_ids(times_s: np.ndarray, keys: int, z: float, seed: int, shift_s: float) -> np.ndarray:
    """Zipf(z) ranks mapped to keys through a fresh permutation per period of ``shift_s``."""
    ranks = zipf_key_ids(times_s.size, keys, z, seed)
    period = (times_s // shift_s).astype(np.int64)
    rng = np.random.default_rng(seed + 1)
    perms = np.stack([rng.permutation(keys) for _ in range(int(period.max(initial=0)) + 1)])
    return perms[period, ranks].astype(np.int64)


def values(n: int, seed: int) -> np.ndarray:
    """Multiples of 1/4: sums are exact in any order, so results compare exactly."""
    return np.random.default_rng(seed + 2).integers(0, 400, size=n) / 4.0


def demo_input(s: DemoSettings) -> DemoInput:
    phases = schedule(s)
    n = scheduled_records(phases)
    times = scheduled_times(phases, n)
    ids = drifting_ids(times, s.keys, s.zipf, s.seed, s.shift_s)
    names = [key_name(i) for i in range(s.keys)]
    shifts = [float(t) for t in np.arange(0.0, s.input_s, s.shift_s)]
    burst = [s.burst_at_s, s.burst_at_s + s.burst_s] if s.burst_s else []
    events = Events(ids, values(n, s.seed), np.zeros(n, dtype=np.int64), names)
    return DemoInput(phases, events, shifts, burst)


def connect_events(s: DemoSettings, start_ms: int) -> Events:
    """The events of the Kafka Connect file: the first hot set's keys, 1 ms apart from ``start_ms``."""
    n = s.connect_records
    ids = drifting_ids(np.zeros(n), s.keys, s.zipf, s.seed + 100, s.shift_s)
    times = start_ms + np.arange(n, dtype=np.int64)
    return Events(ids, values(n, s.seed + 100), times, [key_name(i) for i in range(s.keys)])


def json_lines(events: Events) -> Iterator[str]:
    """One JSON object per line, the fields the router reads from Connect's records by default."""
    for i in range(events.ids.size):
        doc = {"key": events.name(int(events.ids[i])), "value": float(events.values[i]),
               "event_time": int(events.times[i])}  # fmt: skip
        yield json.dumps(doc) + "\n"


def joined(first: Events, second: Events) -> Events:
    """Two event sets over the same key names, as one (the truth is computed over both)."""
    return Events(
        np.concatenate([first.ids, second.ids]),
        np.concatenate([first.values, second.values]),
        np.concatenate([first.times, second.times]),
        first.names,
    )
