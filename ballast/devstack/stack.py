"""The embedded local stack as a whole: brokers, Connect, Spark and Ballast's services, up and down.

Why one orchestrator: ``ballast stack up`` and the pytest session fixture both call
:func:`start_stack`, so what tests exercise is what users run. Each part lives in its own module
(:mod:`~ballast.devstack.brokers`, :mod:`~ballast.devstack.connect_worker`,
:mod:`~ballast.devstack.spark_cluster`, :mod:`~ballast.devstack.services`); this one decides the
order: up is brokers, Connect, Spark; down is the reverse, services first (they talk to all of
them), and the brokers last, all signalled together.

State lives in one folder (``stack.json``, :mod:`ballast.devstack.state`, plus per-process data
and logs). ``down`` stops exactly the pids recorded there, after checking each pid still runs a
command that names this folder, so a recycled pid is never signalled. Long steps report what they
do through an optional ``progress`` callback (``ballast stack up`` prints it), never by printing.
"""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

from ballast.devstack.brokers import (
    format_storage,
    new_cluster_id,
    plan_nodes,
    start_node,
    wait_for_cluster,
    write_broker_config,
)
from ballast.devstack.connect_worker import start_connect
from ballast.devstack.jvm import StackSettings
from ballast.devstack.processes import Progress, pid_alive, port_open, quiet, stop_pid
from ballast.devstack.security import create_users, make_security
from ballast.devstack.services import service_status, stop_services
from ballast.devstack.spark_cluster import SparkSettings, spark_status, start_spark, stop_spark
from ballast.devstack.state import LOOPBACK, StackError, StackState
from ballast.paths import classpath


def start_stack(
    state_dir: str | Path,
    brokers: int = 1,
    connect: bool = False,
    ports: list[int] | None = None,
    connect_port: int | None = None,
    timeout: float = 180.0,
    settings: StackSettings | None = None,
    progress: Progress = quiet,
    spark: bool = False,
    spark_workers: int = 2,
    spark_settings: SparkSettings | None = None,
    secure: bool = False,
    host: str = LOOPBACK,
    namespace: str = "",
) -> StackState:
    """Format (first time only) and start a KRaft cluster, optionally with Connect and Spark; idempotent.

    An existing, running stack in ``state_dir`` is reused, and what it lacks of the request (Connect,
    Spark) is added; a recorded but stopped one is restarted with its data. ``progress`` receives one
    line per step ("starting broker 1 on …"). ``secure``: SASL_SSL for clients, a SCRAM user per
    service, ACLs enforced (:mod:`ballast.devstack.security`); a folder keeps the mode it was made in.
    ``host`` and ``namespace``: the brokers bind and advertise ``host`` inside network ``namespace``
    (a host of :mod:`ballast.devstack.hosts`), never loopback; only for a new folder.
    """
    settings = settings or StackSettings()
    state_dir = Path(state_dir).resolve()
    state_dir.mkdir(parents=True, exist_ok=True)
    state = StackState.load_or_new(state_dir)
    if not state.nodes:  # a new folder, or one that so far ran only Spark or services
        state.nodes = plan_nodes(state_dir, brokers, ports, secure, host)
        state.cluster_id = new_cluster_id()
        state.namespace = namespace
        state.security = make_security(state_dir, addresses=(host,)) if secure else None
    elif len(state.nodes) != brokers:
        raise StackError(
            f"{state_dir} holds a {len(state.nodes)}-broker stack; stop it and remove the folder "
            f"(`ballast stack down --purge`) to start one with {brokers}"
        )
    elif secure != (state.security is not None):
        held, asked = ("a secured", "an open") if state.security else ("an open", "a secured")
        raise StackError(
            f"{state_dir} holds {held} stack; stop it and remove the folder "
            f"(`ballast stack down --purge`) to start {asked} one"
        )
    voters = ",".join(f"{n.node_id}@{n.host}:{n.controller_port}" for n in state.nodes)
    cp = classpath("kafka")
    for node in state.nodes:
        write_broker_config(node, voters, state.replication, state.security)
    state.save()
    format_storage(state.nodes, state.cluster_id, cp, settings.java, progress)
    for node in state.nodes:
        if not pid_alive(node.pid, str(state_dir)) and port_open(node.port):
            raise StackError(f"port {node.port} is taken by another process; choose other ports")
        start_node(state, node.node_id, settings, progress)
    logs = [n.log for n in state.nodes]
    internal = state.security.internal_conf(state.internal_bootstrap) if state.security else None
    wait_for_cluster(state.bootstrap, brokers, timeout=timeout, logs=logs, progress=progress, conf=internal)
    if state.security is not None:
        progress(f"creating the SCRAM users ({', '.join(state.security.users)})…")
        create_users(state.security, state.internal_bootstrap, timeout=timeout)
    if connect:
        start_connect(state, rest_port=connect_port, timeout=timeout, settings=settings, progress=progress)
    if spark:
        # on the brokers' host (one host per stack folder)
        host, namespace = (state.nodes[0].host, state.namespace)
        start_spark(state, spark_workers, spark_settings, settings.java, timeout, progress, host, namespace)
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
    """Stop the services, Spark, Connect, then every broker this folder recorded; ``purge`` deletes it."""
    state_dir = Path(state_dir).resolve()
    try:
        state = StackState.load(state_dir)
    except StackError:
        if purge and state_dir.exists():
            shutil.rmtree(state_dir)
        return None
    marker = str(state_dir)
    stop_services(state)  # first: they talk to everything below
    if state.spark:  # then Spark: its executors may still be talking to the brokers
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
                "address": n.bootstrap,
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
        status["spark"] = spark_status(state)
    status["services"] = service_status(state)
    return status
