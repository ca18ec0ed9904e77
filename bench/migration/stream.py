"""The input: one Zipf stream, the same in every run, produced at a steady pace; and the stale table.

Why a stream at a steady rate and not slices in lockstep (as :mod:`bench.reduce` releases them):
a migration takes from one micro-batch (all at once) to a hundred (fluid), and what it costs is
seen in the batches that run while it is under way, with input arriving as in production. The
events are generated once (:func:`bench.reduce.backlog.keyed_events`: Zipf(z) ranks through a
seeded permutation, values multiples of 1/4, ``per_ms`` events per ms of event time) and every run
produces a prefix of the same sequence, from the first event, at the same rate; the rebalance is
asked for at the same point of it. A run stops its input ``tail_s`` after its migration ended, so
a longer migration reads a longer prefix; the reference is computed over the prefix each run
produced.

Why a stale table: Zipf(1.0) over 10,000 keys on 8 workers is balanced by moving a handful of
keys (the hottest few; measured with the controller's planner: 4 to 6), too few for pacing to
matter. A table left by an *earlier* hot set is what makes a rebalance move many keys: the keys it
pins are no longer heavy, the planner no longer tracks them, and the plan hands each back to its
hash home, state and all (docs/controller.md, planning). :func:`stale_pins` is that table: the
earlier hot set's keys (another permutation of the same Zipf), each placed greedily on the least
loaded worker as a balancing of that hot set would have, kept where that is not the key's hash
home. The benchmark asks for it as one routing update before any input, so these keys build
their state at the pinned worker and the rebalance moves them back.
"""

from __future__ import annotations

import threading
import time

import numpy as np

from ballast.avro.wire import INPUT_HEADER, encode_input_body
from ballast.harness.events import Events
from ballast.kafka.clients import DeliveryTracker, make_producer, produce_waiting
from ballast.kafka.configuration import KafkaConfig
from ballast.routing.murmur2 import kafka_partition
from ballast.workload import key_name, zipf_probabilities
from bench.reduce.backlog import keyed_events

STALE_SEED = 7  # the earlier hot set's permutation: seed + this (the stream's is seed + 1)


def stream(keys: int, z: float, seed: int, per_ms: int, start_ms: int, events: int) -> Events:
    """The input of every run (the same arrays whatever the mode)."""
    return keyed_events(events, keys, z, seed, per_ms, start_ms)


def stale_pins(keys: int, z: float, seed: int, count: int, workers: int) -> dict[str, int]:
    """``count`` pins a balancing of an earlier hot set would have left: its keys hottest first,
    each taken off its hash home and put on the least loaded worker; a key whose least loaded
    worker is its home needs no pin and is skipped."""
    perm = np.random.default_rng(seed + STALE_SEED).permutation(keys)
    share = zipf_probabilities(keys, z)
    names = [key_name(int(i)) for i in range(keys)]
    home = np.array([kafka_partition(n.encode(), workers) for n in names])
    load = np.zeros(keys)
    load[perm] = share
    worker_load = np.bincount(home, weights=load, minlength=workers)
    pins: dict[str, int] = {}
    for rank in range(keys):
        if len(pins) >= count:
            break
        k = int(perm[rank])
        worker_load[home[k]] -= load[k]
        w = int(np.argmin(worker_load))
        worker_load[w] += load[k]
        if w != home[k]:
            pins[names[k]] = w
    return pins


def encoded(events: Events, lo: int, hi: int) -> list[tuple[bytes, bytes]]:
    """Events ``lo`` to ``hi`` as input records (key, value); the sequence number is the index."""
    out = []
    ids = events.ids[lo:hi].tolist()
    values = events.values[lo:hi].tolist()
    times = events.times[lo:hi].tolist()
    for j, (i, v, t) in enumerate(zip(ids, values, times, strict=True)):
        k = events.name(i).encode()
        out.append((k, INPUT_HEADER + encode_input_body(k, v, (lo + j).to_bytes(8, "big"), t)))
    return out


class Feeder(threading.Thread):
    """Produces ``events`` to ``topic`` from the first, ``rate`` per second, in steps of ``step``
    (each flushed), until stopped or out of events. ``produced`` is how many the broker has."""

    def __init__(self, kafka: KafkaConfig, topic: str, events: Events, rate: float, step: int = 100) -> None:
        super().__init__(daemon=True, name="bench-migration-feeder")
        self.topic = topic
        self.events = events
        self.rate = float(rate)
        self.step = step
        self.producer = make_producer(kafka.with_client_id(f"{topic}-feeder"), **{"linger.ms": 5})
        self.produced = 0
        self.started_ms = 0
        self.behind_s = 0.0  # the most the feeder fell behind its pace
        self.error: BaseException | None = None
        self._stop_event = threading.Event()

    def run(self) -> None:
        try:
            self._feed()
        except BaseException as exc:  # reported by check()
            self.error = exc

    def _feed(self) -> None:
        n = int(self.events.ids.size)
        t0 = time.monotonic()
        self.started_ms = int(time.time() * 1000)
        while not self._stop_event.is_set() and self.produced < n:
            lo, hi = self.produced, min(self.produced + self.step, n)
            tracker = DeliveryTracker()
            for key, value in encoded(self.events, lo, hi):
                produce_waiting(self.producer, self.topic, value, key, tracker)
            self.producer.flush(60)
            tracker.raise_if_failed()
            self.produced = hi
            ahead = hi / self.rate - (time.monotonic() - t0)
            if ahead > 0:
                self._stop_event.wait(ahead)
            else:
                self.behind_s = max(self.behind_s, -ahead)

    def check(self) -> None:
        if self.error is not None:
            raise RuntimeError(f"the input feeder failed: {self.error!r}") from self.error
        if (
            not self.is_alive()
            and self.produced < int(self.events.ids.size)
            and not self._stop_event.is_set()
        ):
            raise RuntimeError("the input feeder stopped early")

    def stop(self) -> int:
        """Stop after the current step; how many events were produced."""
        self._stop_event.set()
        self.join(120)
        self.check()
        return self.produced
