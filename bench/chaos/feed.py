"""What the campaign writes to the input topic: the drifting stream with its burst, the producer whose
clock runs ahead, junk bytes, and the flush that closes the last windows. Everything goes through
the :class:`~bench.chaos.ledger.Ledger` first.

Why event time = the time of production (as the demo's feeder does): a fault is placed in wall time,
and with event time = wall time a window's start says what was happening when its records were
offered. Keys and values are the demo's drifting Zipf (a hot set drawn anew every ``shift_s``),
values multiples of 1/4, so sums are exact in any order and an exact row compares with ``==``.

Why the flush goes to every input partition, with event time = now: the reduce's event time follows
its slowest input partition, so one flush record in one partition closes nothing; and a flush
stamped ahead of the clock is what a router's future bound refuses, so the campaign waits until the
clock has passed the last window's end plus the watermark delay and stamps the flush with the time.
"""

from __future__ import annotations

import threading
import time
from functools import partial

import numpy as np

from ballast.avro.wire import INPUT_HEADER, encode_input_body
from ballast.harness.feed import Phase, scheduled_records
from ballast.kafka.clients import make_producer
from ballast.kafka.configuration import KafkaConfig
from ballast.workload import FLUSH_KEY, key_name
from bench.chaos.ledger import DATA, FLUSH, JUNK, SKEWED, Ledger
from bench.chaos.params import Params
from services.demo.workload import drifting_ids, scheduled_times, values

STEP_S = 0.05

# bytes no router can read as an input event: not Avro, Avro's magic with nothing behind it, an
# unknown fingerprint, a JSON object without a key, and half of a real record
JUNK_SAMPLES = (
    b"not an event",
    b"\xc3\x01",
    b"\xc3\x01\x00\x01\x02\x03\x04\x05\x06\x07garbage",
    b'{"value": 1.0}',
)


def phases(p: Params, burst_at_s: float) -> list[Phase]:
    after = p.input_s - burst_at_s - p.burst_s
    return [
        Phase("calm", p.rate, burst_at_s),
        Phase("burst", p.rate * p.burst_factor, p.burst_s),
        Phase("recover", p.rate, max(0.0, after)),
    ]


def stream(p: Params, schedule: list[Phase], seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Key ids and values of the stream, in order (the same for every run of ``seed``)."""
    n = scheduled_records(schedule)
    ids = drifting_ids(scheduled_times(schedule, n), p.keys, p.zipf, seed, max(1.0, p.shift_s))
    return ids, values(n, seed)


def junk_record(i: int, valid: bytes) -> bytes:
    sample = i % (len(JUNK_SAMPLES) + 1)
    return valid[: len(valid) // 2] if sample == len(JUNK_SAMPLES) else JUNK_SAMPLES[sample]


class Writer:
    """One producer for the campaign's one-off writes (junk, flush) and the skewed producer."""

    def __init__(self, kafka: KafkaConfig, topic: str, ledger: Ledger, client: str) -> None:
        self.topic, self.ledger = topic, ledger
        self.producer = make_producer(kafka.with_client_id(client), **{"linger.ms": 5})

    def event(self, kind: str, key: str, value: float, event_time: int, partition: int | None = None) -> None:
        index = self.ledger.add(kind, key, value, event_time)
        body = encode_input_body(key.encode(), value, index.to_bytes(8, "big"), event_time)
        self._send(INPUT_HEADER + body, key.encode(), index, partition)

    def junk(self, count: int) -> None:
        valid = INPUT_HEADER + encode_input_body(b"key-junk", 1.0, b"", int(time.time() * 1000))
        for i in range(count):
            index = self.ledger.add(JUNK, "", float("nan"), 0)
            self._send(junk_record(i, valid), None, index, None)
        self.flush()

    def flush_all(self, partitions: int) -> None:
        """A flush event to every input partition, stamped now."""
        now = int(time.time() * 1000)
        for partition in range(partitions):
            self.event(FLUSH, FLUSH_KEY, 0.0, now, partition)
        self.flush()

    def _send(self, value: bytes, key: bytes | None, index: int, partition: int | None) -> None:
        ack = partial(self.ledger.ack, index)
        while True:
            try:
                if partition is None:
                    self.producer.produce(self.topic, value, key, on_delivery=ack)
                else:
                    self.producer.produce(self.topic, value, key, partition=partition, on_delivery=ack)
                return
            except BufferError:
                self.producer.poll(0.05)

    def flush(self) -> None:
        self.producer.flush(120)


def warm_up(writer: Writer, ids: np.ndarray, vals: np.ndarray, rate: float = 200.0) -> None:
    """The warm-up's records (the stream's first keys and values, from the end of the sequence so
    the stream itself is unchanged), at ``rate``, stamped with the time."""
    for i in range(ids.size):
        writer.event(DATA, key_name(int(ids[i])), float(vals[i]), int(time.time() * 1000))
        if i % 50 == 49:
            writer.producer.poll(0)
            time.sleep(50 / rate)
    writer.flush()


class Feeder(threading.Thread):
    """The stream, phase after phase at its rates, each record stamped with its production time."""

    def __init__(
        self,
        kafka: KafkaConfig,
        topic: str,
        ledger: Ledger,
        schedule: list[Phase],
        ids: np.ndarray,
        vals: np.ndarray,
    ) -> None:
        super().__init__(daemon=True, name="chaos-feeder")
        self.writer = Writer(kafka, topic, ledger, f"{topic}-feeder")
        self.schedule, self.ids, self.vals = schedule, ids, vals
        self.produced = 0
        self.phase = ""
        self.started_ms = 0
        self.last_ms = 0  # the newest event time written
        self.error: BaseException | None = None
        self._halt = threading.Event()

    def run(self) -> None:
        try:
            self.started_ms = int(time.time() * 1000)
            for phase in self.schedule:
                if self._halt.is_set():
                    break
                self.phase = phase.name
                self._feed(phase)
            self.writer.flush()
            self.phase = "done"
        except BaseException as exc:  # reported by check()
            self.error = exc

    def _feed(self, phase: Phase) -> None:
        t0 = time.monotonic()
        goal = int(phase.rate * phase.seconds)
        done = 0
        step = max(1, int(phase.rate * STEP_S))
        while done < goal and not self._halt.is_set():
            hi = min(self.produced + step, self.produced + goal - done, self.ids.size)
            now_ms = int(time.time() * 1000)
            for i in range(self.produced, hi):
                self.writer.event(DATA, key_name(int(self.ids[i])), float(self.vals[i]), now_ms)
            self.writer.producer.poll(0)
            done += hi - self.produced
            self.produced = hi
            self.last_ms = now_ms
            ahead = done / phase.rate - (time.monotonic() - t0)
            if ahead > 0:
                self._halt.wait(ahead)

    def check(self) -> None:
        if self.error is not None:
            raise RuntimeError(f"the input feeder failed: {self.error!r}") from self.error

    def stop(self) -> None:
        self._halt.set()
        self.join(120)


class SkewedProducer(threading.Thread):
    """A producer whose clock runs ``ahead_s`` ahead: the stream's keys, at ``rate``, for ``seconds``."""

    def __init__(
        self,
        kafka: KafkaConfig,
        topic: str,
        ledger: Ledger,
        ahead_s: float,
        rate: float,
        seconds: float,
        keys: int,
        seed: int,
    ) -> None:
        super().__init__(daemon=True, name="chaos-skewed-producer")
        self.writer = Writer(kafka, topic, ledger, f"{topic}-skewed")
        self.ahead_ms, self.rate, self.seconds = int(ahead_s * 1000), rate, seconds
        self.rng = np.random.default_rng(seed + 7)
        self.keys = keys
        self.sent = 0

    def run(self) -> None:
        t0 = time.monotonic()
        while time.monotonic() - t0 < self.seconds:
            now = int(time.time() * 1000)
            key = key_name(int(self.rng.integers(self.keys)))
            self.writer.event(SKEWED, key, float(self.rng.integers(0, 400)) / 4.0, now + self.ahead_ms)
            self.sent += 1
            time.sleep(1.0 / self.rate)
        self.writer.flush()
