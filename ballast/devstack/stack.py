"""The embedded local stack: Kafka brokers (KRaft), Kafka Connect and Spark as plain processes.

Why our own launcher instead of Kafka's shell scripts: the broker comes from Maven as jars, not as a
distribution, and tests need many short-lived clusters on free loopback ports, each in its own
folder, that stop only the processes they started. ``ballast stack up`` and the pytest session
fixture both call :func:`start_stack`, so what tests exercise is what users run.

State lives in one folder (``stack.json`` plus per-node data and logs). ``down`` stops exactly the
pids recorded there, after checking each pid still runs a command that names this folder, so a
recycled pid is never signalled. The optional Spark standalone cluster is managed by
:mod:`ballast.devstack.spark_cluster` (it builds on this module's process helpers, so this module
imports it only where it is used) and recorded in the same file.

How the JVMs run (java executable, heaps) is a :class:`StackSettings`, passed in
by the caller; nothing is read from the environment here. Long steps report what they do through
an optional ``progress`` callback (``ballast stack up`` prints it), never by printing themselves.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from string import Template
from typing import TYPE_CHECKING

from ballast.paths import DEPLOY_DIR, classpath
from ballast.settings import Settings, setting
from ballast.waiting import WaitTimeout, wait_until

if TYPE_CHECKING:
    from ballast.devstack.spark_cluster import SparkSettings, SparkState

STATE_FILE = "stack.json"
PROGRESS_EVERY = 5.0  # seconds between "still waiting" progress lines

Progress = Callable[[str], None]


def _quiet(_message: str) -> None:
    """The default progress hook: say nothing."""


@dataclass(frozen=True)
class StackSettings(Settings):
    """How the local stack starts its JVMs (``ballast stack up``)."""

    java: str = setting("java", "the java executable that runs brokers, Connect and Spark")
    broker_heap: str = setting("768m", "heap of each broker JVM (-Xmx)")
    connect_heap: str = setting("512m", "heap of the Kafka Connect JVM (-Xmx)")


class StackError(RuntimeError):
    """The local stack could not be started, reached or stopped; the message says which log to read."""


@dataclass
class NodeState:
    node_id: int
    port: int
    controller_port: int
    data_dir: str
    config: str
    log: str
    pid: int | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"


@dataclass
class ConnectState:
    rest_port: int
    config: str
    log: str
    pid: int | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.rest_port}"


@dataclass
class StackState:
    state_dir: str
    cluster_id: str
    nodes: list[NodeState] = field(default_factory=list)
    connect: ConnectState | None = None
    spark: SparkState | None = None

    @property
    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes)

    @property
    def replication(self) -> int:
        return 3 if len(self.nodes) >= 3 else 1

    def node(self, node_id: int) -> NodeState:
        for n in self.nodes:
            if n.node_id == node_id:
                return n
        raise KeyError(f"no node {node_id} in stack at {self.state_dir}")

    def save(self) -> None:
        path = Path(self.state_dir) / STATE_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2))
        tmp.replace(path)

    @classmethod
    def load(cls, state_dir: str | Path) -> StackState:
        path = Path(state_dir) / STATE_FILE
        if not path.exists():
            raise StackError(
                f"no stack recorded in {state_dir} (nothing to do; start one with `ballast stack up`)"
            )
        raw = json.loads(path.read_text())
        nodes = [NodeState(**n) for n in raw.pop("nodes")]
        connect = raw.pop("connect")
        spark = raw.pop("spark", None)  # absent in folders written before Spark was part of the stack
        if spark:
            from ballast.devstack.spark_cluster import SparkState

            spark = SparkState.from_dict(spark)
        return cls(nodes=nodes, connect=ConnectState(**connect) if connect else None, spark=spark, **raw)


# --- ports and processes ------------------------------------------------------------------------


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def _new_cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, base64url without padding (Kafka's Uuid format).

    Like Kafka's ``Uuid.randomUuid``, never one starting with ``-``: command-line parsers (the
    storage tool's among them) would take it for an option.
    """
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def pid_alive(pid: int | None, marker: str | None = None) -> bool:
    """True if ``pid`` runs (a zombie does not count) and, when ``marker`` is given, its command
    line mentions ``marker`` (so a recycled pid of some other program is never taken for ours)."""
    if not pid:
        return False
    proc = Path(f"/proc/{pid}")
    try:
        stat = (proc / "stat").read_text()
        cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False
    if stat[stat.rindex(")") + 2] == "Z":  # exited, not yet reaped by its parent
        return False
    return marker is None or marker in cmdline


def _java(
    main: str, args: list[str], cp: str, heap: str, log: Path, java: str = "java"
) -> subprocess.Popen[bytes]:
    cmd = [
        java,
        f"-Xmx{heap}",
        "-Xms128m",
        "-XX:+UseG1GC",
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={DEPLOY_DIR / 'log4j2.properties'}",
        "-cp",
        cp,
        main,
        *args,
    ]
    with open(log, "ab") as out:
        # A new session: the stack outlives `ballast stack up` and ignores the caller's Ctrl-C.
        try:
            return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        except OSError as exc:
            raise StackError(
                f"cannot run java ({java!r}: {exc.strerror}); install a JDK 17+ or set --java / BALLAST_JAVA"
            ) from None


def _render(template: Path, target: Path, **values: object) -> None:
    target.write_text(Template(template.read_text()).substitute({k: str(v) for k, v in values.items()}))


def _tail(path: str | Path, lines: int = 25) -> str:
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


# --- brokers --------------------------------------------------------------------------------------


def _plan_nodes(state_dir: Path, brokers: int, ports: list[int] | None) -> list[NodeState]:
    if brokers not in (1, 3):
        raise ValueError("--brokers must be 1 or 3")
    if ports is not None and len(ports) != brokers:
        raise ValueError(f"need {brokers} broker ports, got {len(ports)}")
    nodes = []
    for i in range(brokers):
        node_id = i + 1
        node_dir = state_dir / f"node-{node_id}"
        node_dir.mkdir(parents=True, exist_ok=True)
        nodes.append(
            NodeState(
                node_id=node_id,
                port=ports[i] if ports else free_port(),
                controller_port=free_port(),
                data_dir=str(node_dir / "data"),
                config=str(node_dir / "server.properties"),
                log=str(node_dir / "broker.log"),
            )
        )
    return nodes


def _write_broker_config(node: NodeState, voters: str, replication: int) -> None:
    _render(
        DEPLOY_DIR / "kafka" / "server.properties.tmpl",
        Path(node.config),
        node_id=node.node_id,
        voters=voters,
        port=node.port,
        controller_port=node.controller_port,
        data_dir=node.data_dir,
        replication=replication,
        min_isr=2 if replication >= 3 else 1,
    )


def _format_storage(
    nodes: list[NodeState], cluster_id: str, cp: str, java: str = "java", progress: Progress = _quiet
) -> None:
    procs = []
    for node in nodes:
        if (Path(node.data_dir) / "meta.properties").exists():
            continue
        progress(f"formatting storage of node {node.node_id}…")
        args = ["format", f"--cluster-id={cluster_id}", "-c", node.config, "--ignore-formatted"]
        procs.append((node, _java("kafka.tools.StorageTool", args, cp, "256m", Path(node.log), java)))
    for node, proc in procs:
        if proc.wait(timeout=120) != 0:
            raise StackError(f"formatting KRaft storage of node {node.node_id} failed:\n{_tail(node.log)}")


def start_node(
    state: StackState, node_id: int, settings: StackSettings | None = None, progress: Progress = _quiet
) -> None:
    """Start one broker process of a recorded stack (used by `up` and by failure tests)."""
    settings = settings or StackSettings()
    node = state.node(node_id)
    if pid_alive(node.pid, state.state_dir):
        progress(f"broker {node.node_id} already running on {node.bootstrap} (pid {node.pid})")
        return
    progress(f"starting broker {node.node_id} on {node.bootstrap}…")
    cp = classpath("kafka")
    proc = _java("kafka.Kafka", [node.config], cp, settings.broker_heap, Path(node.log), settings.java)
    node.pid = proc.pid
    state.save()


def stop_pid(pid: int | None, marker: str, timeout: float = 30.0, hard: bool = False) -> None:
    """SIGTERM (or SIGKILL when ``hard``) a pid we started, then wait for it to go away."""
    if not pid_alive(pid, marker):
        return
    assert pid is not None
    os.kill(pid, signal.SIGKILL if hard else signal.SIGTERM)

    def gone() -> bool:
        with contextlib.suppress(ChildProcessError):
            if os.waitpid(pid, os.WNOHANG)[0] == pid:  # reap it if it is our child
                return True
        return not pid_alive(pid, marker)

    try:
        wait_until(gone, timeout, f"process {pid} to exit")
    except WaitTimeout:
        os.kill(pid, signal.SIGKILL)


def stop_node(state: StackState, node_id: int, hard: bool = False) -> None:
    node = state.node(node_id)
    stop_pid(node.pid, state.state_dir, hard=hard)
    node.pid = None
    state.save()


class _Ticker:
    """Calls ``progress`` with the elapsed time, at most every :data:`PROGRESS_EVERY` seconds."""

    def __init__(self, what: str, progress: Progress) -> None:
        self.what = what
        self.progress = progress
        self.start = time.monotonic()
        self.next = self.start + PROGRESS_EVERY

    def __call__(self) -> None:
        now = time.monotonic()
        if now >= self.next:
            self.progress(f"{self.what}… ({now - self.start:.0f} s)")
            self.next = now + PROGRESS_EVERY


def wait_for_cluster(
    bootstrap: str,
    brokers: int,
    timeout: float = 120.0,
    logs: list[str] | None = None,
    progress: Progress = _quiet,
) -> None:
    """Block until ``brokers`` brokers answer a metadata request (and a controller is elected)."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(
        {"bootstrap.servers": bootstrap, "socket.connection.setup.timeout.ms": 2000, "log_level": 0}
    )
    last = ["no answer"]
    progress(f"waiting for the cluster at {bootstrap}…")
    tick = _Ticker("waiting for the cluster", progress)

    def ready() -> bool:
        tick()
        try:
            md = admin.list_topics(timeout=3)
        except Exception as exc:  # KafkaException while the JVM starts
            last[0] = str(exc)
            return False
        last[0] = f"{len(md.brokers)} of {brokers} brokers, controller {md.controller_id}"
        return len(md.brokers) >= brokers and md.controller_id >= 0

    try:
        wait_until(ready, timeout, f"cluster at {bootstrap}", interval=0.5, describe=lambda: last[0])
    except WaitTimeout as exc:
        tails = "\n".join(f"--- {log}\n{_tail(log)}" for log in (logs or []))
        raise StackError(f"{exc}\n{tails}") from None


# --- Connect ----------------------------------------------------------------------------------------


def start_connect(
    state: StackState,
    rest_port: int | None = None,
    timeout: float = 180.0,
    settings: StackSettings | None = None,
    progress: Progress = _quiet,
) -> ConnectState:
    """Start a Kafka Connect worker in distributed mode against the stack and wait for its REST API."""
    settings = settings or StackSettings()
    connect_dir = Path(state.state_dir) / "connect"
    connect_dir.mkdir(parents=True, exist_ok=True)
    cs = state.connect or ConnectState(
        rest_port=rest_port or free_port(),
        config=str(connect_dir / "connect-distributed.properties"),
        log=str(connect_dir / "connect.log"),
    )
    _render(
        DEPLOY_DIR / "connect" / "connect-distributed.properties.tmpl",
        Path(cs.config),
        bootstrap=state.bootstrap,
        rest_port=cs.rest_port,
        replication=state.replication,
    )
    if pid_alive(cs.pid, state.state_dir):
        progress(f"Kafka Connect already running at {cs.url} (pid {cs.pid})")
    else:
        progress(f"starting Kafka Connect on {cs.url}…")
        main = "org.apache.kafka.connect.cli.ConnectDistributed"
        cp = classpath("kafka")
        proc = _java(main, [cs.config], cp, settings.connect_heap, Path(cs.log), settings.java)
        cs.pid = proc.pid
    state.connect = cs
    state.save()
    from ballast.devstack.connect import wait_for_connect

    wait_for_connect(cs.url, timeout=timeout, log=cs.log, progress=progress)
    return cs


# --- the whole stack ------------------------------------------------------------------------------


def start_stack(
    state_dir: str | Path,
    brokers: int = 1,
    connect: bool = False,
    ports: list[int] | None = None,
    connect_port: int | None = None,
    timeout: float = 180.0,
    settings: StackSettings | None = None,
    progress: Progress = _quiet,
    spark: bool = False,
    spark_workers: int = 2,
    spark_settings: SparkSettings | None = None,
) -> StackState:
    """Format (first time only) and start a KRaft cluster, optionally with Connect and Spark; idempotent.

    An existing, running stack in ``state_dir`` is reused, and what it lacks of the request (Connect,
    Spark) is added; a recorded but stopped one is restarted with its data. ``progress`` receives one
    line per step ("starting broker 1 on …").
    """
    settings = settings or StackSettings()
    state_dir = Path(state_dir).resolve()
    state_dir.mkdir(parents=True, exist_ok=True)
    try:
        state = StackState.load(state_dir)
    except StackError:  # nothing recorded yet
        state = StackState(state_dir=str(state_dir), cluster_id="")
    if not state.nodes:  # a new folder, or one that so far ran only Spark
        state.nodes = _plan_nodes(state_dir, brokers, ports)
        state.cluster_id = _new_cluster_id()
    elif len(state.nodes) != brokers:
        raise StackError(
            f"{state_dir} holds a {len(state.nodes)}-broker stack; stop it and remove the folder "
            f"(`ballast stack down --purge`) to start one with {brokers}"
        )
    voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in state.nodes)
    cp = classpath("kafka")
    for node in state.nodes:
        _write_broker_config(node, voters, state.replication)
    state.save()
    _format_storage(state.nodes, state.cluster_id, cp, settings.java, progress)
    for node in state.nodes:
        if not pid_alive(node.pid, str(state_dir)) and port_open(node.port):
            raise StackError(f"port {node.port} is taken by another process; choose other ports")
        start_node(state, node.node_id, settings, progress)
    logs = [n.log for n in state.nodes]
    wait_for_cluster(state.bootstrap, brokers, timeout=timeout, logs=logs, progress=progress)
    if connect:
        start_connect(state, rest_port=connect_port, timeout=timeout, settings=settings, progress=progress)
    if spark:
        from ballast.devstack.spark_cluster import start_spark

        start_spark(state, spark_workers, spark_settings, settings.java, timeout, progress)
    return state


def running_stack(state_dir: str | Path) -> StackState | None:
    """The stack recorded in ``state_dir`` if every broker of it runs, else None."""
    try:
        state = StackState.load(Path(state_dir).resolve())
    except StackError:
        return None
    marker = state.state_dir
    return state if state.nodes and all(pid_alive(n.pid, marker) for n in state.nodes) else None


def stop_stack(state_dir: str | Path, purge: bool = False) -> StackState | None:
    """Stop Spark, Connect, then every broker this folder recorded; ``purge`` deletes the folder too."""
    state_dir = Path(state_dir).resolve()
    try:
        state = StackState.load(state_dir)
    except StackError:
        if purge and state_dir.exists():
            shutil.rmtree(state_dir)
        return None
    marker = str(state_dir)
    if state.spark:  # first: its executors may still be talking to the brokers
        from ballast.devstack.spark_cluster import stop_spark

        stop_spark(state)
    if state.connect:
        stop_pid(state.connect.pid, marker)
        state.connect.pid = None
    # Signal every broker first, then wait: stopped one by one, the last ones wait for a quorum
    # that is already leaving, which turns a 5-second shutdown into a minute.
    for node in state.nodes:
        if pid_alive(node.pid, marker):
            os.kill(node.pid, signal.SIGTERM)  # type: ignore[arg-type]
    for node in state.nodes:
        stop_pid(node.pid, marker)
        node.pid = None
    state.save()
    if purge:
        shutil.rmtree(state_dir)
    return state


def stack_status(state_dir: str | Path) -> dict[str, object]:
    """What runs, on which ports, and where the logs are: for `ballast stack status`."""
    state = StackState.load(state_dir)
    marker = str(Path(state_dir).resolve())
    status: dict[str, object] = {
        "state_dir": state.state_dir,
        "cluster_id": state.cluster_id,
        "bootstrap": state.bootstrap,
        "nodes": [
            {
                "node_id": n.node_id,
                "port": n.port,
                "pid": n.pid,
                "running": pid_alive(n.pid, marker),
                "log": n.log,
            }
            for n in state.nodes
        ],
    }
    if state.connect:
        c = state.connect
        status["connect"] = {"url": c.url, "pid": c.pid, "running": pid_alive(c.pid, marker), "log": c.log}
    if state.spark:
        from ballast.devstack.spark_cluster import spark_status

        status["spark"] = spark_status(state)
    return status
