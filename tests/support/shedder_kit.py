"""For the shedder's integration tests: input at chosen rates, and a group standing in for the routers.

Why a stand-in and not the routers: the shedder's half is measuring a group's lag and asking the
controller; the routers' half (applying a SHEDDING setting) has tests of its own. A router
processes thousands of records a second, so overloading one on a loaded 2-core machine would
measure the machine. :class:`StandIn` is a plain consumer in the routers' group with a capacity we
choose: it reads the input topics, keeps each record with the keep-probability the control log says
(folded here with the library reader, as a router does), spends ``1 / capacity`` seconds on each kept
record and none on a shed one, and commits its offsets every ``commit_s``. So shedding relieves it
as it relieves the real pipeline, and its lag answers the shedder's decisions.
"""

from __future__ import annotations

import threading
import time
import zlib
from collections.abc import Mapping

from confluent_kafka import TopicPartition

from ballast.control.log import ControlLogReader
from ballast.control.state import initial_state
from ballast.harness.pipeline import Pipeline
from ballast.kafka.clients import make_consumer, make_producer
from ballast.kafka.configuration import KafkaConfig
from ballast.kafka.topics import TopicLayout

WORKERS = 2
PARTITIONS = 2


def second_input(layout: TopicLayout) -> str:
    return f"{layout.prefix}.input-b"


class Feeder(threading.Thread):
    """Produces to each topic at its rate (records/s), in 50 ms slices; ``rates`` may change meanwhile."""

    def __init__(self, kafka: KafkaConfig, rates: Mapping[str, float]) -> None:
        super().__init__(daemon=True)
        self.producer = make_producer(kafka.with_client_id("shedder-test-feeder"), **{"linger.ms": 5})
        self.rates = dict(rates)
        self.sent: dict[str, int] = dict.fromkeys(rates, 0)
        self.stop = threading.Event()

    def run(self) -> None:
        start = time.monotonic()
        owed = dict.fromkeys(self.rates, 0.0)
        last = start
        while not self.stop.is_set():
            now = time.monotonic()
            for topic, rate in self.rates.items():
                owed[topic] = owed.get(topic, 0.0) + rate * (now - last)
                n = int(owed[topic])
                owed[topic] -= n
                for i in range(n):
                    key = f"k{(self.sent.get(topic, 0) + i) % 97}".encode()
                    self.producer.produce(topic, key=key, value=b"x" * 20, timestamp=int(time.time() * 1000))
                self.sent[topic] = self.sent.get(topic, 0) + n
            self.producer.poll(0)
            last = now
            time.sleep(0.05)
        self.producer.flush(30)


class _Reported(threading.Thread):
    """A stand-in's thread: its ``_run``'s failure is kept in ``error`` for the test to read (an
    exception in a thread would otherwise only be printed)."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # the test reads it
            self.error = exc

    def _run(self) -> None:
        raise NotImplementedError


class StandIn(_Reported):
    """A consumer in the routers' group with a fixed capacity for kept records (module docstring)."""

    def __init__(
        self,
        pipe: Pipeline,
        topics: list[str],
        capacity: float,
        commit_s: float = 0.5,
        forward_to: str | None = None,
    ) -> None:
        super().__init__()
        self.forward_to = forward_to  # a topic the kept records are written to (the routed topic)
        self.topics = topics
        self.capacity = capacity
        self.commit_s = commit_s
        self.kafka = pipe.kafka
        self.group = pipe.router_group
        self.control = pipe.layout.name("control")
        self.stop = threading.Event()
        self.kept: dict[str, int] = dict.fromkeys(topics, 0)
        self.read: dict[str, int] = dict.fromkeys(topics, 0)
        self.commits: list[tuple[float, dict[tuple[str, int], int]]] = []  # (wall s, offsets)

    def _run(self) -> None:
        consumer = make_consumer(self.kafka.with_client_id("stand-in-router"), self.group,
                                 **{"auto.offset.reset": "earliest"})  # fmt: skip
        reader = ControlLogReader(self.kafka, self.control, initial_state(WORKERS))
        reader.read_to_end(30)
        consumer.subscribe(self.topics)
        producer = (
            make_producer(self.kafka.with_client_id("stand-in-router-out")) if self.forward_to else None
        )
        positions: dict[tuple[str, int], int] = {}
        busy_until = time.monotonic()
        next_commit = time.monotonic() + self.commit_s
        try:
            while not self.stop.is_set():
                reader.poll(0.0)
                for m in consumer.consume(200, timeout=0.1):
                    if m.error():
                        continue
                    topic = m.topic()
                    self.read[topic] += 1
                    keep = reader.state.keep_for(topic)
                    # a deterministic choice per record, as the routers make it
                    u = zlib.crc32(f"{topic}/{m.partition()}/{m.offset()}".encode()) / 2**32
                    if u < keep:
                        self.kept[topic] += 1
                        if producer is not None:
                            producer.produce(self.forward_to, key=m.key(), value=m.value())
                            producer.poll(0)
                        busy_until = max(busy_until, time.monotonic()) + 1.0 / self.capacity
                        delay = busy_until - time.monotonic()
                        if delay > 0.002:
                            time.sleep(delay)
                    positions[(topic, m.partition())] = m.offset() + 1
                    if time.monotonic() >= next_commit:
                        next_commit = self._commit(consumer, positions)
                if time.monotonic() >= next_commit:
                    next_commit = self._commit(consumer, positions)
        finally:
            if producer is not None:
                producer.flush(30)
            consumer.close()
            reader.close()

    def _commit(self, consumer, positions: dict[tuple[str, int], int]) -> float:
        if positions:
            consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in positions.items()],
                            asynchronous=False)  # fmt: skip
            self.commits.append((time.time(), dict(positions)))
        return time.monotonic() + self.commit_s


def control_events(pipe: Pipeline) -> list[dict]:
    """Every event of the control log, from its genesis (the fold refuses a gap or a bad event)."""
    reader = ControlLogReader(pipe.kafka, pipe.layout.name("control"), initial_state(WORKERS), start_offset=0)
    try:
        return reader.read_to_end(60)
    finally:
        reader.close()


def shedding_events(pipe: Pipeline) -> list[dict]:
    return [e for e in control_events(pipe) if e["type"] == "SHEDDING"]


class StandInReduce(_Reported):
    """A reduce job reading the routed topic at ``capacity`` records/s, publishing its progress.

    Spark commits no offsets; a reduce job's position is the ``end_offsets`` of the ``ReduceProgress``
    its driver publishes per micro-batch. This one publishes one every ``batch_s`` (source
    ``<job>/driver``, as the real driver), with the positions it reached, the rows it read since the
    last, and the time it spent on them (``triggerExecution``: ``1/capacity`` per record), from
    which the shedder measures its capacity as it does a Spark job's.
    """

    def __init__(self, pipe: Pipeline, job: str, capacity: float, batch_s: float = 1.0) -> None:
        super().__init__()
        self.kafka = pipe.kafka
        self.topic = pipe.layout.name("routed")
        self.metrics = pipe.layout.name("metrics")
        self.job = job
        self.capacity = capacity
        self.batch_s = batch_s
        self.stop = threading.Event()
        self.processed = 0

    def _run(self) -> None:
        from ballast.avro.codec import AvroCodec
        from ballast.metrics.records import metrics_record

        codec = AvroCodec("io.ballast.MetricsRecord")
        consumer = make_consumer(self.kafka.with_client_id("stand-in-reduce"), f"{self.job}-unused")
        producer = make_producer(self.kafka.with_client_id("stand-in-reduce-progress"))
        consumer.assign([TopicPartition(self.topic, p, 0) for p in range(WORKERS)])
        positions = [0] * WORKERS
        rows, busy_s = 0, 0.0
        busy_until = time.monotonic()
        batch, started = 0, time.time()
        next_batch = time.monotonic() + self.batch_s
        try:
            while not self.stop.is_set():
                for m in consumer.consume(100, timeout=0.05):
                    if m.error():
                        continue
                    busy_until = max(busy_until, time.monotonic()) + 1.0 / self.capacity
                    delay = busy_until - time.monotonic()
                    if delay > 0.002:
                        time.sleep(delay)
                    positions[m.partition()] = m.offset() + 1
                    self.processed += 1
                    rows, busy_s = rows + 1, busy_s + 1.0 / self.capacity
                if time.monotonic() >= next_batch:
                    end = time.time()
                    durations = {"triggerExecution": max(round(busy_s * 1000), 1)} if rows else {}
                    body = {"job": self.job, "batch_id": batch, "input_rows": rows, "durations_ms": durations,
                            "end_offsets": list(positions)}  # fmt: skip
                    rows, busy_s = 0, 0.0
                    record = metrics_record(f"{self.job}/driver", int(started * 1000), int(end * 1000),
                                            "ReduceProgress", body)  # fmt: skip
                    producer.produce(self.metrics, key=self.job.encode(), value=codec.encode(record))
                    producer.poll(0)
                    batch, started = batch + 1, end
                    next_batch = time.monotonic() + self.batch_s
        finally:
            producer.flush(30)
            consumer.close()
