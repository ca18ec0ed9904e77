"""One deployment driven from outside: its services as processes, its input written, its topics watched.

Why one harness: the router tests, the reduce tests, the demo and the benchmarks each had their
own router-in-a-thread or router argv, their own follower of the output topic, their own reader
of worker statistics and their own "flush". A :class:`Pipeline` is what they share:

* services start as their own commands (``ballast router run``, ``ballast reduce run|submit``,
  ``ballast controller run``, ``ballast shedder run``)
  through the local stack's supervisor (:mod:`ballast.devstack.services`), in a folder of their
  own, and stop (SIGTERM), or die (SIGKILL to every process group below them), on request;
* the connection reaches them as flags, its secrets through their environment;
* input is produced here; progress is read from Kafka only: the routers' committed offsets (what
  they routed, durably), the epoch markers on the routed topic (which epoch every routed partition
  has reached), the reduce's ``ReduceProgress`` on the metrics topic (how far each job has read);
* a planning round is the controller's command (``ballast controller plan --json``).

Nothing here imports a service: what a test checks against ground truth stays the test's own.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from ballast.avro.codec import AvroCodec
from ballast.cli.connection import ConnectionSettings
from ballast.control.signing import SIGNING_KEY_ENV, SigningKey
from ballast.deployment.create import Deployment, create_deployment
from ballast.devstack.processes import Progress, quiet, tail
from ballast.devstack.services import (
    ServiceCommand,
    ballast_argv,
    exit_code,
    is_running,
    service_dir,
    signal_service,
    start_service,
    stop_service,
    stop_services,
    wait_exit,
    wait_ready,
)
from ballast.devstack.state import ServiceState, StackState
from ballast.harness.routed import MarkerWatch
from ballast.kafka.clients import DeliveryTracker, make_producer, produce_all, produce_waiting
from ballast.kafka.configuration import KafkaConfig
from ballast.kafka.groups import GroupOffsets
from ballast.kafka.identities import router_group
from ballast.kafka.topics import TopicLayout
from ballast.metrics.reader import MetricsReader
from ballast.metrics.records import Body, ReduceProgress
from ballast.waiting import wait_until

B = TypeVar("B", bound=Body)


class ServiceFailed(RuntimeError):
    """A service of the pipeline exited while the harness waited on it; the message has its log."""

    def __init__(self, message: str, service: str = "", log: str = "") -> None:
        super().__init__(message)
        self.service, self.log = service, log


def flags(settings: Mapping[str, Any]) -> list[str]:
    """Settings as flags: ``{"commit_interval_ms": 200, "exactly_once": False}`` gives
    ``--commit-interval-ms 200 --no-exactly-once``."""
    argv: list[str] = []
    for name, value in settings.items():
        flag = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            argv.append(flag if value else f"--no-{flag[2:]}")
        elif isinstance(value, (list, tuple)):
            argv += [flag, ",".join(str(v) for v in value)]
        else:
            argv += [flag, str(value)]
    return argv


class Pipeline:
    """A deployment (topics and genesis, made unless ``create`` is False) and the services started on it.

    ``folder`` holds the services' folders and logs (a local stack folder, or any folder: the
    brokers may be elsewhere). Services get the layout's prefix, workers and input partitions, and
    ``kafka``'s connection, as flags. ``signing_key``: a key file (made when missing) that signs the
    control log (:mod:`ballast.control.signing`). ``service_kafka``: the connection of each service
    kind ("router", "reduce", …) when it is not ``kafka``'s, as on a secured cluster where each kind
    is its own principal; ``kafka`` is then the operator's (topics, genesis, one-shot commands).
    ``namespace``: the network namespace every service runs in (a host of
    :mod:`ballast.devstack.hosts`: the services' host of a layout across hosts).
    """

    def __init__(
        self,
        kafka: KafkaConfig,
        layout: TopicLayout,
        folder: str | Path,
        *,
        active_workers: int = 0,
        create: bool = True,
        issuer: str = "ballast-harness",
        progress: Progress = quiet,
        specs: Mapping[str, Any] | None = None,
        signing_key: str | Path | None = None,
        service_kafka: Mapping[str, KafkaConfig] | None = None,
        namespace: str = "",
    ) -> None:
        self.kafka = kafka
        self.namespace = namespace
        self.layout = layout
        self.folder = Path(folder).resolve()
        self.folder.mkdir(parents=True, exist_ok=True)
        self.state = StackState.load_or_new(self.folder)
        self.progress = progress
        self.deployment: Deployment | None = None
        # a signed control log: the key file (made when missing) signs the genesis, and every service
        # gets its path in the environment (the writers sign with it)
        self.signing_env: dict[str, str] = {}
        key = None
        if signing_key is not None:
            key, _made = SigningKey.load_or_create(signing_key)
            self.signing_env = {SIGNING_KEY_ENV: str(Path(signing_key).resolve())}
        if create:
            self.deployment = create_deployment(
                kafka, layout, active_workers, specs=specs, issuer=issuer, signing_key=key
            )
        self.router_group = router_group(layout.prefix)  # what the routers take by default
        self._connection = ConnectionSettings.of(kafka, self.folder)
        self._service_connections = {
            kind: ConnectionSettings.of(cfg, self.folder) for kind, cfg in (service_kafka or {}).items()
        }
        self.started: list[str] = []  # the services this pipeline started (others in the folder are not ours)
        self._producer: Any = None
        self._offsets: GroupOffsets | None = None
        self._markers: MarkerWatch | None = None
        self._metrics: MetricsReader | None = None

    # --- services -------------------------------------------------------------------------------

    def layout_args(self) -> list[str]:
        lay = self.layout
        return [
            "--prefix",
            lay.prefix,
            "--workers",
            str(lay.workers),
            "--input-partitions",
            str(lay.input_partitions),
        ]

    def command(self, name: str, kind: str, *args: str) -> ServiceCommand:
        """A service running ``ballast <args>`` with its kind's connection (flags and secrets)."""
        settings = self._service_connections.get(kind, self._connection)
        connection = settings.to_argv()
        env = {**settings.secret_env(), **self.signing_env}
        return ServiceCommand(name, kind, (*args, *connection), env=env, namespace=self.namespace)

    def start(self, command: ServiceCommand, wait: bool = True, timeout: float = 300.0) -> ServiceState:
        """Start ``command``; with ``wait``, until it announced it is ready (or fail with its log)."""
        service = start_service(self.state, command, self.progress)
        if command.name not in self.started:
            self.started.append(command.name)
        if wait:
            wait_ready(self.state, command.name, timeout, self.progress)
        return service

    def wait_ready(self, name: str, timeout: float = 300.0) -> None:
        """Until a service started with ``wait=False`` announced it is ready (or fail with its log):
        services that take long to start (Spark) are started together, then waited for."""
        wait_ready(self.state, name, timeout, self.progress)

    def router(self, router_id: str, *extra: str, name: str | None = None, **settings: Any) -> ServiceCommand:
        """The command of router ``router_id`` (``settings``: its flags by setting name; ``extra``:
        more flags as typed, last, so they win). Its group and transactional.id are the defaults a
        user's router takes from the prefix (:mod:`ballast.kafka.identities`), ``router_group``."""
        args = ("router", "run", "--router-id", router_id, *self.layout_args(), *flags(settings), *extra)
        return self.command(name or f"router-{router_id}", "router", *args)

    def start_router(self, router_id: str, *extra: str, wait: bool = True, **settings: Any) -> ServiceState:
        return self.start(self.router(router_id, *extra, **settings), wait)

    def controller(self, controller_id: str = "controller", *extra: str, name: str | None = None,
                   **settings: Any) -> ServiceCommand:  # fmt: skip
        """The command of a controller (``ballast controller run``) of this deployment."""
        args = ("controller", "run", "--controller-id", controller_id, "--prefix", self.layout.prefix,
                *flags(settings), *extra)  # fmt: skip
        return self.command(name or f"controller-{controller_id}", "controller", *args)

    def shedder(
        self, *streams: str, extra: tuple[str, ...] = (), name: str = "shedder", **settings: Any
    ) -> ServiceCommand:
        """The command of the shedder (``ballast shedder run``), ``streams`` its declarations
        (``topic=T,target=30s,priority=1,min-accuracy=0.5``); it watches the routers' group by
        default, as a user's does."""
        declared = [arg for s in streams for arg in ("--stream", s)]
        args = ("shedder", "run", "--prefix", self.layout.prefix, *declared, *flags(settings), *extra)
        return self.command(name, "shedder", *args)

    def reduce(
        self, job: str, processor: str, *extra: str, master: str = "", **settings: Any
    ) -> ServiceCommand:
        """The command of reduce ``job`` (``ballast reduce run``, or ``submit`` to ``master``), its
        checkpoint in its service folder unless ``settings`` name one; ``extra``: more flags as they
        are typed, ``settings``: more flags by setting name."""
        name = self.reduce_name(job)
        folder = service_dir(self.state, name)
        settings = {"checkpoint": folder / "checkpoint", **settings}
        common = ("--job-id", job, "--processor", processor, *self.layout_args(), *flags(settings), *extra)
        if master:
            driver = ("--master", master, "--driver-log", str(self.driver_log(job)))
            return self.command(name, "reduce", "reduce", "submit", *driver, *common)
        return self.command(name, "reduce", "reduce", "run", *common)

    def start_reduce(
        self, job: str, processor: str, *extra: str, master: str = "", wait: bool = True, **settings: Any
    ) -> ServiceState:
        return self.start(self.reduce(job, processor, *extra, master=master, **settings), wait)

    @staticmethod
    def reduce_name(job: str) -> str:
        return f"reduce-{job}"

    def driver_log(self, job: str) -> Path:
        """Where ``reduce submit`` sends the driver's output (the service log is spark-submit's own)."""
        return service_dir(self.state, self.reduce_name(job)) / "driver.log"

    def service(self, name: str) -> ServiceState:
        found = self.state.service(name)
        if found is None:
            raise KeyError(f"no service {name} in {self.folder}")
        return found

    def running(self, name: str) -> bool:
        return is_running(self.state, self.service(name))

    def check_running(self, *names: str) -> None:
        """Raise :class:`ServiceFailed`, with the end of its log, for a service that exited."""
        for name in names or [s.name for s in self.state.services if s.pid is not None]:
            service = self.service(name)
            if not is_running(self.state, service):
                code = exit_code(service)
                log = service.log
                raise ServiceFailed(f"service {name} exited ({code}); {log}:\n{tail(log, 40)}", name, log)

    def stop(self, name: str, timeout: float = 60.0) -> int | None:
        """SIGTERM and wait (then SIGKILL); the exit code when known."""
        return stop_service(self.state, name, timeout)

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        """``sig`` to every process group of the service, as a machine failure (SIGKILL) would."""
        signal_service(self.state, name, sig)
        wait_exit(self.state, name, 120.0)

    def signal(self, name: str, sig: int) -> None:
        """``sig`` to every process group of the service, without waiting (SIGSTOP, SIGCONT)."""
        signal_service(self.state, name, sig)

    def wait_exit(self, name: str, timeout: float = 60.0) -> int | None:
        """Until the service has exited; its exit code (None when it did not exit in time, or when
        another process started it)."""
        wait_exit(self.state, name, timeout)
        return exit_code(self.service(name))

    def log(self, name: str) -> str:
        """What the service said on stderr, all of it."""
        return Path(self.service(name).log).read_text(errors="replace")

    def output(self, name: str) -> str:
        """What the service printed on stdout (a router's totals when it stopped)."""
        return Path(self.service(name).out).read_text(errors="replace")

    def log_tail(self, name: str, lines: int = 40) -> str:
        return tail(self.service(name).log, lines)

    # --- one-shot commands ---------------------------------------------------------------------

    def run_command(self, *args: str, timeout: float = 300.0) -> str:
        """``ballast <args>`` with this pipeline's connection, to its end; its stdout (error: its stderr)."""
        argv = ballast_argv([*args, *self._connection.to_argv()])
        env = {**os.environ, **self._connection.secret_env(), **self.signing_env}
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"`ballast {' '.join(args)}` exited {done.returncode}: {done.stderr.strip()}")
        return done.stdout

    def plan(
        self, theta: float, *, records: int = 0, since_ms: int = 0, timeout: float = 120.0, **kw: Any
    ) -> dict:
        """One planning round of the controller (``ballast controller plan --json``): what it did.

        As a request when this pipeline started a controller; otherwise ``--direct`` (the round
        appends the update itself: a deployment without a controller has no other writer)."""
        started = (self.state.service(name) for name in self.started)
        direct = not any(s is not None and s.kind == "controller" for s in started)
        settings = {"theta": theta, "records": records, "since_ms": since_ms, "timeout": timeout}
        settings |= {"direct": direct, **kw}
        out = self.run_command(
            "controller", "plan", "--prefix", self.layout.prefix, "--json", *flags(settings)
        )
        return json.loads(out.strip().splitlines()[-1])

    # --- input ---------------------------------------------------------------------------------

    def produce(self, events: Iterable[dict[str, Any]], rate: float = 0.0, step: int = 2_000) -> int:
        """Avro ``InputEvent`` dicts to the input topic, in order, at ``rate`` events/s (0: at once)."""
        codec = AvroCodec("io.ballast.InputEvent")
        return self.produce_raw(((e["key"].encode(), codec.encode(e)) for e in events), rate, step)

    def produce_raw(
        self, records: Iterable[tuple[bytes | None, bytes]], rate: float = 0.0, step: int = 2_000
    ) -> int:
        if self._producer is None:
            self._producer = make_producer(self.kafka.with_client_id(f"{self.layout.prefix}-input"))
        topic = self.layout.name("input")
        sent = 0
        started = time.monotonic()
        batch: list[tuple[bytes | None, bytes]] = []
        for record in records:
            batch.append(record)
            if len(batch) >= step:
                sent += produce_all(self._producer, topic, iter(batch))
                batch = []
                ahead = sent / rate - (time.monotonic() - started) if rate else 0
                if ahead > 0:
                    time.sleep(ahead)
        if batch:
            sent += produce_all(self._producer, topic, iter(batch))
        return sent

    def flush(self, event: dict[str, Any]) -> int:
        """``event`` (a flush event, :func:`ballast.workload.flush_event`) into **every** partition
        of the input topic, as it has them now; how many.

        Why every partition: the reduce's event time follows the slowest input partition
        (docs/reduce.md, "Time"), so the last windows close once each partition has shown progress
        past them (or has been idle for the reduce's idle timeout)."""
        if self._producer is None:
            self._producer = make_producer(self.kafka.with_client_id(f"{self.layout.prefix}-input"))
        topic = self.layout.name("input")
        # asked of the producer itself: its metadata then knows a partition added since it started
        partitions = len(self._producer.list_topics(topic, timeout=30).topics[topic].partitions)
        value = AvroCodec("io.ballast.InputEvent").encode(event)
        tracker = DeliveryTracker()
        for p in range(partitions):
            produce_waiting(self._producer, topic, value, event["key"].encode(), tracker, partition=p)
        self._producer.flush(60)
        tracker.raise_if_failed()
        return partitions

    # --- watching --------------------------------------------------------------------------------

    def routed(self) -> int:
        """Input records the routers have routed, durably (their group's committed offsets; -1: ask again)."""
        if self._offsets is None:
            self._offsets = GroupOffsets(self.kafka, self.router_group, self.layout.name("input"))
        return self._offsets.total()

    def wait_routed(self, n: int, timeout: float = 300.0, *, watch: Iterable[str] = ()) -> None:
        """Until the routers have committed ``n`` input offsets; a ``watch``ed service exiting fails it."""
        last = [0]

        def done() -> bool:
            self.check_running(*watch) if watch else None
            last[0] = self.routed()
            return last[0] >= n

        wait_until(done, timeout, f"{n:,} input records routed", 0.2, lambda: f"{last[0]:,} routed")

    def markers(self) -> MarkerWatch:
        if self._markers is None:
            self._markers = MarkerWatch(self.kafka, self.layout.name("routed"), (self.layout.name("input"),))
        return self._markers

    def wait_epoch(self, epoch: int, timeout: float = 120.0) -> None:
        """Until every routed partition holds a marker of ``epoch`` or later (the routers applied it)."""
        watch = self.markers()
        wait_until(
            lambda: watch.poll() >= epoch,
            timeout,
            f"epoch {epoch} announced in every routed partition",
            0.1,
            lambda: f"lowest epoch announced: {watch.lowest()}",
        )

    def metrics(self) -> MetricsReader:
        """One reader of the metrics topic for the pipeline's life (every record read once)."""
        if self._metrics is None:
            self._metrics = MetricsReader(self.kafka, self.layout.name("metrics"))
        return self._metrics

    def metrics_of(self, kind: type[B], source: str | None = None, prefix: str | None = None) -> list[B]:
        """Every metric of ``kind`` (from ``source``, or sources starting with ``prefix``) so far."""
        reader = self.metrics()
        reader.poll(0.1)
        return reader.bodies(kind, source, prefix)

    def reduce_progress(self, job: str) -> list[ReduceProgress]:
        """Every batch the job has reported so far."""
        reader = self.metrics()
        reader.poll(0.1)
        return reader.bodies(ReduceProgress, source=f"{job}/driver")

    def routed_ends(self) -> dict[int, int]:
        return self.markers().follower.end_offsets()

    def wait_reduce_read(
        self, job: str, ends: Mapping[int, int], timeout: float, *, watch: Iterable[str] = ()
    ) -> None:
        """Until a batch of ``job`` has read every routed partition up to ``ends``."""
        seen: list[ReduceProgress] = []

        def covered() -> bool:
            self.check_running(*watch) if watch else None
            seen[:] = self.reduce_progress(job)
            return any(p.covers(ends) for p in seen)

        wait_until(
            covered,
            timeout,
            f"reduce {job} reading the routed topic to {dict(ends)}",
            0.3,
            lambda: f"last batch read to {seen[-1].end_offsets if seen else '-'}",
        )

    def wait_reduce_caught_up(self, job: str, timeout: float = 300.0, *, watch: Iterable[str] = ()) -> None:
        """Until ``job`` has read the routed topic up to its ends as of the call."""
        self.wait_reduce_read(job, self.routed_ends(), timeout, watch=watch)

    def wait_reduce_settled(self, job: str, timeout: float = 300.0, *, watch: Iterable[str] = ()) -> None:
        """Until ``job`` has read everything, including what its own last batches wrote (state chunks):
        a batch covers the routed topic's ends, and the ends did not move since."""
        deadline = time.monotonic() + timeout
        while True:
            ends = self.routed_ends()
            self.wait_reduce_read(job, ends, max(1.0, deadline - time.monotonic()), watch=watch)
            if self.routed_ends() == ends:
                return

    # --- the end ---------------------------------------------------------------------------------

    def close(self) -> None:
        """Every service this pipeline started stopped (SIGTERM, then SIGKILL), every client closed;
        safe to call twice. Services of the folder that others started are left alone."""
        stop_services(self.state, self.started)
        for client in (self._offsets, self._markers, self._metrics):
            if client is not None:
                client.close()
        self._offsets = self._markers = self._metrics = None
        if self._producer is not None:
            self._producer.flush(30)
            self._producer = None

    def __enter__(self) -> Pipeline:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
