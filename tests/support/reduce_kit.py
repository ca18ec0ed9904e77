"""Reduce test kit: one deployment with routers and reduce jobs as real processes (through the
harness, :class:`ballast.harness.pipeline.Pipeline`), and readers of what the jobs wrote.

Ground truth stays outside the code under test: the kit generates the input events itself and
the tests compare the output topic with :mod:`tests.support.reduce_reference` over those events.
Routers and jobs run as services of their own (``ballast router run``, ``ballast reduce
run|submit``), so a test can kill -9 them and restart them from their committed offsets /
checkpoint the way an operator would.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from ballast.avro.codec import AvroCodec, DecodeError
from ballast.control.state import initial_state, routing_update, scale
from ballast.control.writer import ControlLogWriter
from ballast.harness.pipeline import Pipeline
from ballast.kafka.configuration import KafkaConfig
from ballast.kafka.dead_letters import DeadLetter
from ballast.kafka.follow import TopicFollower
from ballast.kafka.reading import read_topic
from ballast.kafka.topics import TopicLayout
from ballast.metrics.records import WorkerStats
from ballast.routing.murmur2 import kafka_partition
from ballast.waiting import wait_until
from ballast.workload import flush_event, key_name, zipf_key_ids
from tests.support.letter_replays import once_each

WORKERS = 8
FLUSH_MS = 20_000  # the flush event's lead over the last event: past every window and delay here
INPUT_PARTITIONS = 4
START_MS = 1_767_225_600_000


def reduce_events(
    n: int,
    num_keys: int = 2_000,
    z: float = 1.0,
    seed: int = 7,
    per_ms: int = 10,
    skew_ms: tuple[int, ...] = (),
) -> list[dict[str, Any]]:
    """Zipf-keyed events with dyadic values (multiples of 1/4: sums are exact in any order) and
    event times that advance 1 ms every ``per_ms`` events (10,000 events = 1 s of event time).

    ``skew_ms[p]`` is added to the event time of every event of input partition ``p`` (the
    partition its key goes to with :data:`INPUT_PARTITIONS` partitions): input partitions whose
    clocks disagree, as producers on different hosts have them. An event's ``payload`` is its index
    in the list (8 bytes, big-endian), so a record found anywhere downstream names its event."""
    ids = zipf_key_ids(n, num_keys, z, seed)
    values = np.random.default_rng(seed + 1).integers(0, 400, size=n) / 4.0
    names = [key_name(i) for i in range(num_keys)]
    skews = [skew_ms[kafka_partition(name.encode(), INPUT_PARTITIONS)] if skew_ms else 0 for name in names]
    return [
        {
            "key": names[int(ids[i])],
            "value": float(values[i]),
            "payload": i.to_bytes(8, "big"),
            "event_time": START_MS + i // per_ms + skews[int(ids[i])],
        }
        for i in range(n)
    ]


def other_worker(key: str, avoid: Iterable[int], workers: int = WORKERS) -> int:
    """A worker for ``key`` that is not its hash home nor any in ``avoid``."""
    banned = {kafka_partition(key.encode(), workers), *avoid}
    for step in range(1, workers + 1):
        w = (kafka_partition(key.encode(), workers) + step) % workers
        if w not in banned:
            return w
    raise ValueError("no worker left")


class ReduceKit:
    def __init__(self, kafka: KafkaConfig, prefix: str, workdir: Path, **pipeline: Any) -> None:
        """``pipeline``: more of :class:`Pipeline`'s options (``service_kafka``, ``signing_key``)."""
        self.kafka = kafka
        self.prefix = prefix
        self.workdir = workdir
        self.layout = TopicLayout(prefix=prefix, workers=WORKERS, input_partitions=INPUT_PARTITIONS)
        self.pipe = Pipeline(kafka, self.layout, workdir, issuer="reduce-tests", **pipeline)
        self.input = self.layout.name("input")
        # the kit's own control log writer, opened on first use: a test with a controller sends
        # requests instead (two writers would fence each other)
        self._writer: ControlLogWriter | None = None
        self.jobs: dict[str, str] = {}  # job -> its service name
        self.commands: dict[str, Any] = {}  # service name -> the command that starts it again
        self.owner: dict[str, int] = {}  # the kit's own record of every pin it sent
        self.hashed_workers = WORKERS  # the kit's own record of the last SCALE it sent
        self._output: TopicFollower | None = None  # follows the output topic (see results)
        self._rows: list[dict[str, Any]] = []  # every output row read, in read order
        self._result_codec = AvroCodec("io.ballast.OutputResult")

    # --- input and control ----------------------------------------------------------------------

    def produce(self, events: list[dict[str, Any]], rate: float = 0.0) -> None:
        """Produce ``events`` in order, paced at ``rate`` events/s (0: as fast as possible)."""
        self.pipe.produce(events, rate)

    @property
    def writer(self) -> ControlLogWriter:
        if self._writer is None:
            self._writer = ControlLogWriter(self.kafka, self.layout.name("control"), initial_state(WORKERS))
        return self._writer

    def assign(self, pins: dict[str, int]) -> int:
        event = self.writer.send(*routing_update(pins, reason="reduce test"))
        self.owner.update(pins)
        return int(event["epoch"])

    def scale(self, workers: int) -> int:
        """``SCALE`` to ``workers`` hashed workers: every unpinned key rehashes."""
        event = self.writer.send(*scale(workers, reason="reduce test"))
        self.hashed_workers = workers
        return int(event["epoch"])

    def current_owner(self, key: str) -> int:
        """The worker ``key`` goes to now, by the kit's own record of what it sent."""
        return self.owner.get(key, kafka_partition(key.encode(), self.hashed_workers))

    def committed(self) -> int:
        """Input offsets the routers have committed (records routed, exactly once)."""
        return self.pipe.routed()

    def flush_after(self, n: int, event_time: int, timeout: float = 300.0, ahead_ms: int = FLUSH_MS) -> None:
        """Once the routers committed all ``n`` events, the flush event (:func:`flush_event`) into every
        input partition: every worker's watermark passes every window, so every window is emitted
        (its own never closes)."""
        self.pipe.wait_routed(n, timeout)
        self.pipe.flush(flush_event(event_time, ahead_ms=ahead_ms))

    # --- processes --------------------------------------------------------------------------------

    def _start(self, command: Any) -> str:
        self.commands[command.name] = command
        self.pipe.start(command, wait=False)
        return command.name

    def start_router(self, router_id: str, **settings: Any) -> str:
        """``ballast router run`` of ``router_id`` (``settings``: more of its flags by setting name)."""
        settings = {"commit_interval_ms": 200, "stats_interval_s": 2, "log_level": "warning", **settings}
        return self._start(self.pipe.router(router_id, **settings))

    def start_job(self, job: str, processor: str, *extra: str, env: dict[str, str] | None = None) -> str:
        """``ballast reduce run`` of ``job`` (``env``: more environment, e.g. a PYTHONPATH)."""
        command = self.pipe.reduce(job, processor, *extra, trigger="1 second")
        if env:
            command = replace(command, env={**command.env, **env})
        self.jobs[job] = self._start(command)
        return self.jobs[job]

    def submit_job(self, job: str, processor: str, master: str, *extra: str) -> str:
        """The job on a Spark standalone cluster, through ``ballast reduce submit`` (the driver runs
        in spark-submit's process groups: killing them all is a driver crash)."""
        command = self.pipe.reduce(job, processor, *extra, master=master, trigger="1 second")
        self.jobs[job] = self._start(command)
        return self.jobs[job]

    def job_log(self, job: str) -> Path:
        """The driver's own log of a submitted job."""
        return self.pipe.driver_log(job)

    def restart_job(self, job: str, *extra: str) -> str:
        """kill -9 the job's driver (every process group below it), then start it again on the same
        checkpoint (``extra``: flags added to its command, e.g. another ``--chunk-bytes``)."""
        name = self.jobs[job]
        self.pipe.kill(name)
        command = self.commands[name]
        if extra:
            command = replace(command, args=(*command.args, *extra))
        return self._start(command)

    def kill_job_mid_batch(
        self, job: str, condition: Callable[[WorkerStats], bool], timeout: float = 300.0
    ) -> WorkerStats:
        """kill -9 the job's driver the moment a worker's stats satisfy ``condition``: a worker has
        written its part of a micro-batch, the batch is not committed (its other tasks still run),
        so the restarted job must run that batch again. Returns the stats that triggered it."""
        reader = self.pipe.metrics()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for m in reader.poll(0.05):
                if (
                    m.source.startswith(f"{job}/worker-")
                    and isinstance(m.body, WorkerStats)
                    and condition(m.body)
                ):
                    self.pipe.kill(self.jobs[job])
                    return m.body
            self.pipe.check_running(self.jobs[job])
        raise TimeoutError(f"no stats of {job} satisfied the condition within {timeout} s")

    def pause_router(self, router_id: str) -> None:
        """SIGSTOP a router: a stalled process (a GC pause, a frozen VM), its transaction left open."""
        self.pipe.signal(f"router-{router_id}", signal.SIGSTOP)

    def resume_router(self, router_id: str) -> None:
        self.pipe.signal(f"router-{router_id}", signal.SIGCONT)

    def restart_router(self, router_id: str, down_s: float = 3.0) -> str:
        """kill -9 a router, leave it down ``down_s``, start it again with the same id."""
        name = f"router-{router_id}"
        self.pipe.kill(name)
        time.sleep(down_s)
        return self._start(self.commands[name])

    def wait_stats(self, job: str, condition: Callable[[WorkerStats], bool], timeout: float = 180.0) -> None:
        """Until some worker stats record of ``job`` satisfies ``condition``."""
        wait_until(
            lambda: any(condition(s) for s in self.worker_stats(job)),
            timeout,
            f"a stats record of {job}",
            1.0,
        )

    def close(self) -> None:
        """SIGTERM every service (a job stops its query), SIGKILL what is left; clients closed."""
        self.pipe.close()
        if self._writer is not None:
            self._writer.close()
        if self._output is not None:
            self._output.close()

    def log_tail(self, name: str, lines: int = 40) -> str:
        return self.pipe.log_tail(name, lines)

    # --- reading what the jobs wrote -----------------------------------------------------------------

    def rows(self, job: str) -> list[dict[str, Any]]:
        """Every output row of ``job`` read so far, in read order (replays and corrections too).

        One follower reads the output topic for the kit's life, so polling for results reads each
        record once instead of the whole topic every time."""
        if self._output is None:
            self._output = TopicFollower(self.kafka, self.layout.name("output"))
        while msgs := self._output.poll(1.0):
            self._rows.extend(self._result_codec.decode(m.value()) for m in msgs)
        return [r for r in self._rows if r["job"] == job]

    def results(self, job: str) -> dict[tuple[str, int], dict[str, Any]]:
        """The latest output row per (key, window start) of ``job``: what a keep-latest reader has."""
        return {(r["key"], r["window_start"]): r for r in self.rows(job)}

    def worker_stats(self, job: str) -> list[WorkerStats]:
        """Every WorkerStats record of ``job`` so far (the harness's one metrics reader)."""
        return self.pipe.metrics_of(WorkerStats, prefix=f"{job}/")

    def dead_letters(self) -> list[Any]:
        return read_topic(self.kafka, self.layout.name("dead_letter"), idle=1.0, timeout=60.0)

    def dead_lettered(self) -> list[DeadLetter]:
        """Every dead letter, with the event it names when it names one: the router's carry the
        input record, the reduce's name the routed record by position (its payload is the event's
        index, :func:`reduce_events`)."""
        letters = [DeadLetter.of(m) for m in self.dead_letters()]
        wanted = {(d.partition, d.offset) for d in letters if d.topic == self.layout.name("routed")}
        found: dict[tuple[int, int], int] = {}
        if wanted:
            envelope = AvroCodec("io.ballast.RoutedEnvelope")
            for m in read_topic(self.kafka, self.layout.name("routed"), idle=2.0, timeout=300.0):
                if (m.partition(), m.offset()) in wanted:
                    try:
                        branch, body = envelope.decode(m.value())["body"]
                    except DecodeError:  # the letter of bytes that were no envelope
                        continue
                    if branch == "io.ballast.DataRecord" and len(body["payload"]) == 8:
                        found[(m.partition(), m.offset())] = int.from_bytes(body["payload"], "big")
        return [replace(d, event=found.get((d.partition, d.offset))) for d in letters]

    def left_out(self, job: str, restarts: int = 0) -> set[int]:
        """Indexes of the events ``job`` dead-lettered as late (each named once, or twice by a batch
        replayed after one of ``restarts`` kills: :mod:`tests.support.letter_replays`); any other
        dead letter of the job fails the caller's test (nothing else is expected of good input)."""
        letters = once_each([d for d in self.dead_lettered() if d.job == job], restarts)
        assert {d.reason for d in letters} <= {"late"}, {d.reason for d in letters}
        late = [d.event for d in letters]
        assert None not in late and len(late) == len(set(late)), "a late letter names no event, or one twice"
        return set(late)  # type: ignore[arg-type]

    def wait_watermark(self, job: str, ms: int, timeout: float = 600.0) -> None:
        """Until a micro-batch of ``job`` ran under a watermark of at least ``ms``: every window that
        ends by then has been emitted (a batch emits what its watermark closed)."""
        wait_until(
            lambda: any(p.watermark_ms >= ms for p in self.pipe.reduce_progress(job)),
            timeout,
            f"a batch of {job} at watermark {ms}",
            2.0,
        )

    def wait_results(
        self, job: str, expected: dict[tuple[str, int], Any], timeout: float = 300.0
    ) -> dict[tuple[str, int], dict[str, Any]]:
        """Wait until the job has written a row for every expected (key, window), or fail with its log."""
        got: dict[tuple[str, int], dict[str, Any]] = {}

        def complete() -> bool:
            self.pipe.check_running(self.jobs[job])
            got.clear()
            got.update(self.results(job))
            return all(k in got for k in expected)

        wait_until(
            complete,
            timeout,
            f"results of job {job}",
            5.0,
            lambda: f"{sum(k in got for k in expected)}/{len(expected)} windows",
        )
        return got
