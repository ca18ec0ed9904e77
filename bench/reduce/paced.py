"""Paced: a contender fed live at a fixed rate, and each record's latency to the batch that read it.

Why live and not a backlog read at a capped rate: with ``maxOffsetsPerTrigger`` = rate x trigger,
a contender that fell behind once (its first batches, the JIT) could never catch up, since it
may not read more than the rate; and a capped read of a backlog splits each batch across the
partitions by their whole backlog, not by what arrived lately. Here the events go into the input
of a deployment of the run's own at ``rate`` while the router routes them and the contender reads
them, as in production; every contender of a comparison gets the same events at the same rate.

Latency of a routed record = the end of the micro-batch that read it (its ``triggerExecution``
end: the batch's outputs are written by then) - the record's routed timestamp (the router's
produce time; the record becomes readable at its transaction's commit, which the latency then
includes). It leaves out what every contender waits for alike (the window's end, the watermark
delay). The feed begins with a few events at once and goes on at the rate only once the contender
has run its first batch, so no contender starts behind; records routed in the first ``warm_s``
seconds of the paced feed are left out (the JIT).
Whether the contender kept up shows in ``drift_ms``: the p50 of the last quarter of the measured
records minus that of the first quarter (near 0 when it kept up; growing with the run when not).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from itertools import islice, takewhile
from pathlib import Path
from typing import Any

import numpy as np

from ballast.harness.events import Events
from ballast.harness.pipeline import Pipeline
from ballast.kafka.configuration import KafkaConfig
from ballast.kafka.follow import TopicFollower
from ballast.kafka.topics import TopicLayout
from bench.reduce.backlog import Backlog, encoded
from bench.reduce.figures import pct
from bench.reduce.params import INPUT_PARTITIONS, WAIT_S, WORKERS, log
from bench.reduce.progress import offsets_read

UNKNOWN_END = 2**62  # a routed partition's end before the feed has routed everything
PRIME = 1_000  # events fed at once before the paced feed, to see the contender up


@dataclass
class PacedBacklog(Backlog):
    """A deployment whose routed topic fills while its contender runs; ``ends`` is known once the
    feed has routed every event (a run is over only after that)."""

    rate: float = 0.0
    feed: threading.Thread | None = None
    failed: list[BaseException] = field(default_factory=list)
    ready: threading.Event = field(default_factory=threading.Event)  # the contender ran a batch
    paced_from_ms: int = 0  # when the paced feed began (after the priming events)
    stopping: threading.Event = field(default_factory=threading.Event)

    def observe(self, batches: dict[int, Any]) -> None:
        """Told of the contender's batches so far (:func:`bench.reduce.runs.run`): the first one
        means it is up, and the paced feed may begin."""
        if batches:
            self.ready.set()

    @property
    def offsets(self) -> int:
        known = sum(self.ends.values())
        return self.records if known >= UNKNOWN_END else known

    def close(self) -> None:
        """The feed stopped (at its next record, however far it got), then the deployment."""
        self.stopping.set()
        self.ready.set()
        if self.feed is not None:
            self.feed.join(30)
        super().close()

    def wait_fed(self) -> None:
        if self.feed is not None:
            self.feed.join(WAIT_S)
        if self.failed:
            raise RuntimeError(f"{self.name}: the paced feed failed") from self.failed[0]


def start_paced(
    kafka: KafkaConfig,
    workdir: Path,
    name: str,
    events: Events,
    rate: float,
    routing: dict[str, Any] | None = None,
    workers: int = WORKERS,
) -> PacedBacklog:
    """A deployment ``bench-<name>`` with its router running and ``events`` going into its input at
    ``rate`` events/s from a thread; its ``ends`` are set once the router has routed them all.
    ``routing``: the settings of a controller whose loop sends routing updates from the router's
    statistics (``ballast controller run``), started with the router; none: hash only."""
    layout = TopicLayout(prefix=f"bench-{name}", workers=workers, input_partitions=INPUT_PARTITIONS)
    pipe = Pipeline(kafka, layout, workdir / f"pipeline-{name}", issuer="bench-reduce")
    routing = dict(routing or {})  # the caller's settings stay as given
    stats = {"stats_interval_s": 1, "heavy_hitters_top": routing.pop("heavy_hitters_top")} if routing else {}
    router = pipe.router(
        f"{layout.prefix}-router", name="router", exactly_once=True, log_level="warning", **stats
    )
    pipe.start(router)
    if routing:
        pipe.start(pipe.controller("controller", name="controller", log_level="warning", **routing))
    backlog = PacedBacklog(name, pipe, events, dict.fromkeys(range(workers), UNKNOWN_END), 0.0, rate=rate)
    n = int(events.ids.size)

    def feed() -> None:
        try:
            records = takewhile(lambda _: not backlog.stopping.is_set(), encoded(events))
            # a few events first, at once: the feed waits for the contender's first batch, so its
            # start-up (20 s and more) does not leave a backlog that the paced part begins behind
            pipe.produce_raw(islice(records, PRIME))
            if not backlog.ready.wait(WAIT_S):
                raise TimeoutError(f"{name}: the contender ran no batch in {WAIT_S:.0f} s")
            if backlog.stopping.is_set():
                return
            backlog.paced_from_ms = int(time.time() * 1000)
            # a send every 50 ms: the rate holds within a trigger interval
            pipe.produce_raw(records, rate=rate, step=max(1, int(rate / 20)))
            pipe.wait_routed(n, WAIT_S)
            backlog.ends = pipe.routed_ends()
        except BaseException as exc:  # handed to the caller by wait_fed
            backlog.failed.append(exc)

    log(f"{name}: feeding {n:,} events to {layout.name('input')} at {rate:,.0f}/s")
    backlog.feed = threading.Thread(target=feed, name=f"feed-{name}", daemon=True)
    backlog.feed.start()
    return backlog


def routed_stamps(pipe: Pipeline) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Per routed partition: the offsets of its records, in order, and their timestamps (ms)."""
    with TopicFollower(pipe.kafka, pipe.layout.name("routed")) as f:
        messages = f.read_to_end(300)
    per: dict[int, list[tuple[int, int]]] = {}
    for m in messages:
        per.setdefault(m.partition(), []).append((m.offset(), m.timestamp()[1]))
    out = {}
    for p, pairs in per.items():
        pairs.sort()
        a = np.array(pairs, dtype=np.int64)
        out[p] = (a[:, 0], a[:, 1])
    return out


def record_latencies(
    batches: list[dict], stamps: dict[int, tuple[np.ndarray, np.ndarray]], from_ms: int
) -> tuple[np.ndarray, np.ndarray]:
    """Each record routed at or after ``from_ms`` and read by one of ``batches`` (in order, each
    with ``end_offsets`` per partition): its routed time and its latency (ms), by routed time."""
    times, lats = [], []
    for b, ranges in offsets_read(batches):
        end_ms = b["start_ms"] + b["duration_ms"]
        for p, lo, hi in ranges:
            if p not in stamps or hi <= lo:
                continue
            offsets, ts = stamps[p]
            i, j = np.searchsorted(offsets, [lo, hi])
            t = ts[i:j]
            t = t[t >= from_ms]
            times.append(t)
            lats.append(end_ms - t)
    if not times:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    t, lat = np.concatenate(times), np.concatenate(lats)
    order = np.argsort(t, kind="stable")
    return t[order], lat[order]


def latency_summary(lats: np.ndarray) -> dict[str, Any]:
    """p50, p99 and max of the latencies (in routed order), and their drift over the run."""
    if lats.size == 0:
        return {"records": 0, "latency_p50_ms": None, "latency_p99_ms": None, "latency_max_ms": None,
                "drift_ms": None}  # fmt: skip
    q = max(1, lats.size // 4)
    values = lats.tolist()
    return {
        "records": int(lats.size),
        "latency_p50_ms": round(pct(values, 50)),
        "latency_p99_ms": round(pct(values, 99)),
        "latency_max_ms": int(lats.max()),
        "drift_ms": round(pct(values[-q:], 50) - pct(values[:q], 50)),
    }
