"""Reduce test kit: one deployment with routers and reduce jobs as real processes, and readers of
what the jobs wrote.

Ground truth stays outside the code under test: the kit generates the input events itself and
the tests compare the output topic with :mod:`tests.support.reduce_reference` over those events.
Routers and jobs run as subprocesses, so a test can kill -9 them and restart them from their
committed offsets / checkpoint the way an operator would.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from ballast.avro.codec import AvroCodec
from ballast.control.deployment import create_deployment
from ballast.control.log import ControlLogWriter
from ballast.control.state import initial_state, routing_update
from ballast.kafka.clients import make_producer, produce_all
from ballast.kafka.config import KafkaConfig
from ballast.kafka.reading import read_topic
from ballast.kafka.topics import TopicLayout
from ballast.routing.murmur2 import kafka_partition
from ballast.waiting import wait_until
from ballast.workload import key_name, zipf_key_ids

WORKERS = 8
INPUT_PARTITIONS = 4
START_MS = 1_767_225_600_000


def reduce_events(
    n: int, num_keys: int = 2_000, z: float = 1.0, seed: int = 7, per_ms: int = 10
) -> list[dict[str, Any]]:
    """Zipf-keyed events with dyadic values (multiples of 1/4: sums are exact in any order) and
    event times that advance 1 ms every ``per_ms`` events (10,000 events = 1 s of event time)."""
    ids = zipf_key_ids(n, num_keys, z, seed)
    values = np.random.default_rng(seed + 1).integers(0, 400, size=n) / 4.0
    return [
        {
            "key": key_name(int(ids[i])),
            "value": float(values[i]),
            "payload": i.to_bytes(8, "big"),
            "event_time": START_MS + i // per_ms,
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
    def __init__(self, kafka: KafkaConfig, prefix: str, workdir: Path) -> None:
        self.kafka = kafka
        self.prefix = prefix
        self.workdir = workdir
        self.layout = TopicLayout(prefix=prefix, workers=WORKERS, input_partitions=INPUT_PARTITIONS)
        create_deployment(kafka, self.layout, issuer="reduce-tests")
        self.input = self.layout.name("input")
        self.codec = AvroCodec("io.ballast.InputEvent")
        self.writer = ControlLogWriter(kafka, self.layout.name("control"), initial_state(WORKERS))
        self.procs: list[subprocess.Popen] = []
        self.jobs: dict[str, subprocess.Popen] = {}  # the running process of each job
        self.routers: dict[str, subprocess.Popen] = {}
        self.owner: dict[str, int] = {}  # the kit's own record of every pin it sent
        self._output = None  # the consumer following the output topic (see results)
        self._latest: dict[tuple[str, str, int], dict[str, Any]] = {}
        self._result_codec = AvroCodec("io.ballast.OutputResult")

    # --- input and control ----------------------------------------------------------------------

    def produce(self, events: list[dict[str, Any]], rate: float = 0.0) -> None:
        """Produce ``events`` in order, paced at ``rate`` events/s (0: as fast as possible)."""
        producer = make_producer(self.kafka)
        step = 2_000
        started = time.monotonic()
        for i in range(0, len(events), step):
            part = events[i : i + step]
            produce_all(producer, self.input, ((e["key"].encode(), self.codec.encode(e)) for e in part))
            if rate:
                ahead = (i + len(part)) / rate - (time.monotonic() - started)
                if ahead > 0:
                    time.sleep(ahead)

    def assign(self, pins: dict[str, int]) -> int:
        event = self.writer.send(*routing_update(pins, reason="reduce test"))
        self.owner.update(pins)
        return int(event["epoch"])

    def committed(self) -> int:
        """Input offsets the routers have committed (records routed, exactly once)."""
        from confluent_kafka import Consumer, KafkaException, TopicPartition

        c = Consumer(self.kafka.consumer(f"{self.prefix}-routers"))
        try:
            tps = [TopicPartition(self.input, p) for p in range(INPUT_PARTITIONS)]
            return sum(max(tp.offset, 0) for tp in c.committed(tps, timeout=10))
        except KafkaException:
            return -1
        finally:
            c.close()

    def flush_after(self, n: int, event_time: int, timeout: float = 300.0) -> None:
        """Once the routers committed all ``n`` events, one event far ahead in event time: Spark's
        watermark passes every window, so every window is emitted (its own never closes)."""
        wait_until(
            lambda: self.committed() >= n,
            timeout,
            f"{n} events routed",
            1.0,
            lambda: f"{self.committed()} routed",
        )
        self.produce(
            [{"key": "zz-flush", "value": 0.0, "payload": b"", "event_time": event_time + 3_600_000}]
        )

    # --- processes --------------------------------------------------------------------------------

    def _spawn(self, name: str, cmd: list[str]) -> subprocess.Popen:
        log = open(self.workdir / f"{name}.log", "ab")  # noqa: SIM115 - the process owns it
        # a session of its own: a kill takes the whole process group (the Python driver, its JVM
        # and Spark's Python workers), as a machine failure would
        proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ), start_new_session=True
        )
        proc.log_path = self.workdir / f"{name}.log"  # type: ignore[attr-defined]
        self.procs.append(proc)
        return proc

    def start_router(self, router_id: str) -> subprocess.Popen:
        self.routers[router_id] = self._spawn(
            f"router-{router_id}",
            [
                sys.executable,
                "-m",
                "services.router",
                "--bootstrap",
                self.kafka.bootstrap_servers,
                "--router-id",
                router_id,
                "--prefix",
                self.prefix,
                "--group-id",
                f"{self.prefix}-routers",
                "--commit-interval-ms",
                "200",
                "--stats-interval-s",
                "2",
                "--log-level",
                "warning",
            ],
        )
        return self.routers[router_id]

    def job_command(self, job: str, processor: str, *extra: str) -> list[str]:
        return [
            "--bootstrap",
            self.kafka.bootstrap_servers,
            "--prefix",
            self.prefix,
            "--job-id",
            job,
            "--processor",
            processor,
            "--checkpoint",
            str(self.workdir / f"checkpoint-{job}"),
            "--trigger",
            "1 second",
            *extra,
        ]

    def start_job(self, job: str, processor: str, *extra: str) -> subprocess.Popen:
        self.jobs[job] = self._spawn(
            f"job-{job}",
            [sys.executable, "-m", "spark_jobs.reduce", "run", *self.job_command(job, processor, *extra)],
        )
        self.jobs[job].relaunch = lambda: self.start_job(job, processor, *extra)  # type: ignore[attr-defined]
        return self.jobs[job]

    def submit_job(self, job: str, processor: str, master: str, *extra: str) -> subprocess.Popen:
        """The job on a Spark standalone cluster, through ``ballast reduce submit`` (the driver runs
        in the submitting process group: killing that group is a driver crash)."""
        self.jobs[job] = self._spawn(
            f"submit-{job}",
            [
                sys.executable,
                "-m",
                "ballast.cli",
                "reduce",
                "submit",
                "--master",
                master,
                "--driver-log",
                str(self.workdir / f"job-{job}.log"),
                *self.job_command(job, processor, *extra),
            ],
        )
        self.jobs[job].relaunch = lambda: self.submit_job(job, processor, master, *extra)  # type: ignore[attr-defined]
        return self.jobs[job]

    def restart_job(self, job: str) -> subprocess.Popen:
        """kill -9 the job's driver, then start it again on the same checkpoint."""
        old = self.jobs[job]
        self.kill(old)
        return old.relaunch()  # type: ignore[attr-defined]

    def restart_router(self, router_id: str, down_s: float = 3.0) -> subprocess.Popen:
        """kill -9 a router, leave it down ``down_s``, start it again with the same id."""
        self.kill(self.routers[router_id])
        time.sleep(down_s)
        return self.start_router(router_id)

    def wait_stats(self, job: str, condition, timeout: float = 180.0) -> None:
        """Until some worker stats record of ``job`` satisfies ``condition``."""
        wait_until(
            lambda: any(condition(s) for s in self.worker_stats(job)),
            timeout,
            f"a stats record of {job}",
            2.0,
        )

    @staticmethod
    def kill(proc: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
        """Signal the process's group and the group of every descendant (spark-submit runs the
        driver in a session of its own), as a machine failure would take them all."""
        for group in _groups(proc):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(group, sig)
        proc.wait(120)

    def close(self) -> None:
        """SIGTERM every process (a job stops its query), SIGKILL what is left of their groups."""
        for proc in self.procs:
            groups = _groups(proc)  # before the parent goes: its children would be re-parented
            for group in groups if proc.poll() is None else ():
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(group, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(30)
            for group in groups:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(group, signal.SIGKILL)
            proc.wait(30)
        self.writer.close()
        if self._output is not None:
            self._output.close()

    def log_tail(self, proc: subprocess.Popen, lines: int = 40) -> str:
        text = Path(proc.log_path).read_text(errors="replace")  # type: ignore[attr-defined]
        return "\n".join(text.splitlines()[-lines:])

    # --- reading what the jobs wrote -----------------------------------------------------------------

    def results(self, job: str) -> dict[tuple[str, int], dict[str, Any]]:
        """The latest output row per (key, window start) of ``job`` (a rewrite replaces the older).

        One consumer follows the output topic for the kit's life, so polling for results reads
        each record once instead of the whole topic every time."""
        from confluent_kafka import Consumer, TopicPartition

        if self._output is None:
            topic = self.layout.name("output")
            self._output = Consumer(self.kafka.consumer(f"{self.prefix}-kit-{uuid.uuid4().hex[:6]}"))
            self._output.assign([TopicPartition(topic, p, 0) for p in range(WORKERS)])
        while True:
            msgs = self._output.consume(10_000, timeout=1.0)
            for m in msgs:
                if m.error() is None:
                    row = self._result_codec.decode(m.value())
                    self._latest[(row["job"], row["key"], row["window_start"])] = row
            if not msgs:
                break
        return {(k, w): row for (j, k, w), row in self._latest.items() if j == job}

    def worker_stats(self, job: str) -> list[dict[str, Any]]:
        codec = AvroCodec("io.ballast.MetricsRecord")
        out = []
        for m in read_topic(self.kafka, self.layout.name("metrics"), idle=2.0, timeout=120.0):
            rec = codec.decode(m.value())
            branch, body = rec["body"]
            if branch == "io.ballast.WorkerStats" and rec["source"].startswith(f"{job}/"):
                out.append({**body, "interval_end": rec["interval_end"]})
        return out

    def dead_letters(self) -> list[Any]:
        return read_topic(self.kafka, self.layout.name("dead_letter"), idle=1.0, timeout=60.0)

    def wait_results(
        self, job: str, expected: dict[tuple[str, int], Any], timeout: float = 300.0
    ) -> dict[tuple[str, int], dict[str, Any]]:
        """Wait until the job has written a row for every expected (key, window), or fail with its log."""
        got: dict[tuple[str, int], dict[str, Any]] = {}

        def complete() -> bool:
            proc = self.jobs[job]
            if proc.poll() is not None:
                raise AssertionError(f"job {job} exited {proc.returncode}:\n{self.log_tail(proc)}")
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


def _groups(proc: subprocess.Popen) -> set[int]:
    """The process groups of ``proc`` and of everything below it."""
    groups = {proc.pid}
    for pid in _descendants(proc.pid):
        with contextlib.suppress(ProcessLookupError):
            groups.add(os.getpgid(pid))
    return groups


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (from /proc's parent links)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found
