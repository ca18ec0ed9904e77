"""KRaft brokers as plain processes: plan the nodes, write their config, format storage, start, wait.

Why our own launcher instead of Kafka's shell scripts: the broker comes from Maven as jars, not as a
distribution, and tests need many short-lived clusters on free loopback ports, each in its own
folder, that stop only the processes they started. Each node is broker *and* controller voter
(KRaft combined mode): one JVM per node, affordable on a laptop; three voters tolerate the loss of
one node.
"""

from __future__ import annotations

import base64
import uuid
from pathlib import Path

from ballast.devstack.jvm import StackSettings, launch_java
from ballast.devstack.processes import (
    Progress,
    Ticker,
    free_port,
    pid_alive,
    quiet,
    render_template,
    stop_pid,
    tail,
)
from ballast.devstack.security import ADMIN_USER, BROKER_PRINCIPAL
from ballast.devstack.state import LOOPBACK, NodeState, SecurityState, StackError, StackState
from ballast.paths import STACK_CONF_DIR, classpath
from ballast.waiting import WaitTimeout, wait_until


def new_cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, base64url without padding (Kafka's Uuid format).

    Like Kafka's ``Uuid.randomUuid``, never one starting with ``-``: command-line parsers (the
    storage tool's among them) would take it for an option.
    """
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def plan_nodes(
    state_dir: Path, brokers: int, ports: list[int] | None, secure: bool = False, host: str = LOOPBACK
) -> list[NodeState]:
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
                internal_port=free_port() if secure else 0,
                host=host,
            )
        )
    return nodes


def write_broker_config(
    node: NodeState, voters: str, replication: int, security: SecurityState | None = None
) -> None:
    """The node's server.properties: PLAINTEXT listeners, or a secured stack's three (see
    :mod:`ballast.devstack.security`) with the security fragment appended."""
    here = node.host
    if security is None:
        listeners = {
            "listeners": f"PLAINTEXT://{here}:{node.port},CONTROLLER://{here}:{node.controller_port}",
            "advertised_listeners": f"PLAINTEXT://{here}:{node.port}",
            "inter_broker_listener": "PLAINTEXT",
            "protocol_map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        }
    else:
        listeners = {
            "listeners": f"CLIENT://{here}:{node.port},INTERNAL://{here}:{node.internal_port},"
            f"CONTROLLER://{here}:{node.controller_port}",
            "advertised_listeners": f"CLIENT://{here}:{node.port},INTERNAL://{here}:{node.internal_port}",
            "inter_broker_listener": "INTERNAL",
            "protocol_map": "CLIENT:SASL_SSL,INTERNAL:SSL,CONTROLLER:SSL",
        }
    render_template(
        STACK_CONF_DIR / "kafka" / "server.properties.tmpl",
        Path(node.config),
        node_id=node.node_id,
        voters=voters,
        data_dir=node.data_dir,
        replication=replication,
        min_isr=2 if replication >= 3 else 1,
        **listeners,
    )
    if security is not None:
        fragment = Path(node.config).with_suffix(".security")
        render_template(
            STACK_CONF_DIR / "kafka" / "security.properties.tmpl",
            fragment,
            keystore=security.broker_keystore,
            truststore=security.ca,
            super_users=f"User:{ADMIN_USER};{BROKER_PRINCIPAL}",
        )
        with open(node.config, "a") as config:
            config.write(fragment.read_text())
        fragment.unlink()


def format_storage(
    nodes: list[NodeState], cluster_id: str, cp: str, java: str = "java", progress: Progress = quiet
) -> None:
    procs = []
    for node in nodes:
        if (Path(node.data_dir) / "meta.properties").exists():
            continue
        progress(f"formatting storage of node {node.node_id}…")
        args = ["format", f"--cluster-id={cluster_id}", "-c", node.config, "--ignore-formatted"]
        procs.append((node, launch_java("kafka.tools.StorageTool", args, cp, "256m", Path(node.log), java)))
    for node, proc in procs:
        if proc.wait(timeout=120) != 0:
            raise StackError(f"formatting KRaft storage of node {node.node_id} failed:\n{tail(node.log)}")


def start_node(
    state: StackState, node_id: int, settings: StackSettings | None = None, progress: Progress = quiet
) -> None:
    """Start one broker process of a recorded stack (used by `up` and by failure tests)."""
    settings = settings or StackSettings()
    node = state.node(node_id)
    if pid_alive(node.pid, state.state_dir):
        progress(f"broker {node.node_id} already running on {node.bootstrap} (pid {node.pid})")
        return
    progress(f"starting broker {node.node_id} on {node.bootstrap}…")
    cp = classpath("kafka")
    proc = launch_java(
        "kafka.Kafka", [node.config], cp, settings.broker_heap, Path(node.log), settings.java, state.namespace
    )
    node.pid = proc.pid
    state.save()


def stop_node(state: StackState, node_id: int, hard: bool = False) -> None:
    node = state.node(node_id)
    stop_pid(node.pid, state.state_dir, hard=hard)
    node.pid = None
    state.save()


def wait_for_cluster(
    bootstrap: str,
    brokers: int,
    timeout: float = 120.0,
    logs: list[str] | None = None,
    progress: Progress = quiet,
    conf: dict[str, object] | None = None,
) -> None:
    """Block until ``brokers`` brokers answer a metadata request (and a controller is elected).

    ``conf``: the client properties to ask with (a secured stack's brokers' own identity); default
    a PLAINTEXT client of ``bootstrap``.
    """
    from confluent_kafka.admin import AdminClient

    conf = conf or {"bootstrap.servers": bootstrap}
    admin = AdminClient(conf | {"socket.connection.setup.timeout.ms": 2000, "log_level": 0})
    last = ["no answer"]
    progress(f"waiting for the cluster at {bootstrap}…")
    tick = Ticker("waiting for the cluster", progress)

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
        tails = "\n".join(f"--- {log}\n{tail(log)}" for log in (logs or []))
        raise StackError(f"{exc}\n{tails}") from None
