"""Input at a schedule of rates, event time = now: one seeded sequence, to one topic or several.

Why event time is the time of production (not a generated clock as in :mod:`bench.migration`): the
questions are asked in wall time (is the lag back under target within 3 policy cycles of the
overload's start; are results exact again within 3 cycles of its end), and with event time = wall
time a window's start says when its records were offered. Every run draws the same keys and values
in the same order (:func:`bench.reduce.backlog.keyed_events`, values multiples of 1/4 so sums are
exact in any order) at the same schedule; the times differ by run, so the feeder records the time
it stamped on each record, and the truth is computed from what it actually produced
(:attr:`Feeder.produced_events`).

Why several topics: the demo runs the same input through two deployments at once (Ballast, and
hash-only routing), and a comparison is fair only if both get the very same records at the very
same moments; one feeder writes each step to every topic, stamped with one time.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import numpy as np

from ballast.avro.wire import INPUT_HEADER, encode_input_body
from ballast.harness.events import Events
from ballast.kafka.clients import DeliveryTracker, make_producer, produce_waiting
from ballast.kafka.configuration import KafkaConfig

STEP_S = 0.05  # one produce-and-flush step per this much of the schedule


@dataclass(frozen=True)
class Phase:
    name: str
    rate: float  # records per second
    seconds: float


def scheduled_records(phases: list[Phase]) -> int:
    """How many records the schedule produces at most (a sequence this long never runs out)."""
    return int(sum(p.rate * p.seconds for p in phases)) + len(phases) + 1


class Feeder(threading.Thread):
    """Produces ``events`` to each of ``topics``, phase after phase, each at its rate, stamping each
    record's event time with the time it is produced. ``phase_starts`` holds each phase's start
    (wall ms)."""

    def __init__(
        self, kafka: KafkaConfig, topics: str | tuple[str, ...], events: Events, phases: list[Phase]
    ) -> None:
        super().__init__(daemon=True, name="input-feeder")
        self.topics = (topics,) if isinstance(topics, str) else tuple(topics)
        self.events = events
        self.phases = phases
        self.producer = make_producer(kafka.with_client_id(f"{self.topics[0]}-feeder"), **{"linger.ms": 5})
        self.times = np.zeros(events.ids.size, dtype=np.int64)
        self.produced = 0
        self.phase_starts: dict[str, int] = {}
        self.ended_ms = 0
        self.behind_s = 0.0  # the most the feeder fell behind its schedule
        self.error: BaseException | None = None
        self._stop_event = threading.Event()

    def run(self) -> None:
        try:
            for phase in self.phases:
                if self._stop_event.is_set():
                    break
                self.phase_starts[phase.name] = int(time.time() * 1000)
                self._feed(phase)
            self.ended_ms = int(time.time() * 1000)
        except BaseException as exc:  # reported by check()
            self.error = exc

    @property
    def phase(self) -> str:
        return next(reversed(self.phase_starts), "") if self.phase_starts else ""

    def _feed(self, phase: Phase) -> None:
        t0 = time.monotonic()
        goal = int(phase.rate * phase.seconds)
        done = 0
        step = max(1, int(phase.rate * STEP_S))
        while done < goal and not self._stop_event.is_set():
            lo = self.produced
            hi = min(lo + step, lo + goal - done, self.events.ids.size)
            if hi <= lo:
                raise RuntimeError("the input sequence ran out before the schedule ended")
            now_ms = int(time.time() * 1000)
            tracker = DeliveryTracker()
            for i in range(lo, hi):
                key = self.events.name(int(self.events.ids[i])).encode()
                body = encode_input_body(key, float(self.events.values[i]), i.to_bytes(8, "big"), now_ms)
                for topic in self.topics:
                    produce_waiting(self.producer, topic, INPUT_HEADER + body, key, tracker)
            self.producer.flush(60)
            tracker.raise_if_failed()
            self.times[lo:hi] = now_ms
            self.produced = hi
            done += hi - lo
            ahead = done / phase.rate - (time.monotonic() - t0)
            if ahead > 0:
                self._stop_event.wait(ahead)
            else:
                self.behind_s = max(self.behind_s, -ahead)

    def produced_events(self) -> Events:
        """What the broker has: ids, values and the event times stamped on them."""
        n = self.produced
        e = self.events
        return Events(e.ids[:n], e.values[:n], self.times[:n].copy(), e.names)

    def check(self) -> None:
        if self.error is not None:
            raise RuntimeError(f"the input feeder failed: {self.error!r}") from self.error

    def stop(self) -> int:
        """Stop after the current step; how many events were produced."""
        self._stop_event.set()
        self.join(120)
        self.check()
        return self.produced
