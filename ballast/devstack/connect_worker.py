"""A Kafka Connect worker (distributed mode) as a plain process against the local stack's brokers.

Why apart from :mod:`ballast.devstack.connect`: that module talks to a running worker over REST
(any worker, ours or a user's); this one starts ours. The worker's config comes from
``ballast/devstack/conf/connect/connect-distributed.properties.tmpl``.
"""

from __future__ import annotations

import os
from pathlib import Path

from ballast.devstack.connect import wait_for_connect
from ballast.devstack.jvm import StackSettings, launch_java
from ballast.devstack.processes import Progress, free_ports, pid_alive, quiet, render_template
from ballast.devstack.security import stack_admin, stack_connection
from ballast.devstack.state import LOOPBACK, ConnectState, StackState
from ballast.paths import STACK_CONF_DIR, classpath

CONNECT_USER = "connect"
CONNECT_GROUP = "ballast-connect"  # the template's group.id and topic names
CONNECT_TOPIC_PREFIX = "ballast-connect-"
WORKER_CLIENTS = ("", "producer.", "consumer.", "admin.")  # the worker's own, and its connectors'


def _secure_worker(state: StackState, config: Path) -> None:
    """The worker, and the clients it makes for connectors, connect as the stack's connect user.

    The password goes into the config file (mode 0600), which Connect reads, never a command line;
    the worker's group and topics are granted first (:func:`~ballast.deployment.acls.connect_worker_acls`).
    """
    from ballast.deployment.acls import connect_worker_acls
    from ballast.kafka.acls import create_acls
    from ballast.kafka.admin import make_admin

    props = stack_connection(state, CONNECT_USER).java()
    props.pop("bootstrap.servers")
    lines = [
        f"{prefix}{key}={str(value).replace(chr(92), chr(92) * 2)}"  # a properties file's escapes
        for prefix in WORKER_CLIENTS
        for key, value in props.items()
    ]
    os.chmod(config, 0o600)
    with open(config, "a") as out:
        out.write("\n# The stack is secured: every client of the worker is its connect user\n")
        out.write("\n".join(lines) + "\n")
    rules = connect_worker_acls(f"User:{CONNECT_USER}", CONNECT_GROUP, CONNECT_TOPIC_PREFIX)
    create_acls(make_admin(stack_admin(state, "ballast-stack")), rules)


def start_connect(
    state: StackState,
    rest_port: int | None = None,
    timeout: float = 180.0,
    settings: StackSettings | None = None,
    progress: Progress = quiet,
) -> ConnectState:
    """Start a Kafka Connect worker in distributed mode against the stack and wait for its REST API.

    It runs on the brokers' host (their address and network namespace), as the brokers do."""
    settings = settings or StackSettings()
    connect_dir = Path(state.state_dir) / "connect"
    connect_dir.mkdir(parents=True, exist_ok=True)
    host = state.nodes[0].host if state.nodes else LOOPBACK
    cs = state.connect or ConnectState(
        rest_port=rest_port or free_ports(1, host, state.namespace)[0],
        config=str(connect_dir / "connect-distributed.properties"),
        log=str(connect_dir / "connect.log"),
        host=host,
    )
    render_template(
        STACK_CONF_DIR / "connect" / "connect-distributed.properties.tmpl",
        Path(cs.config),
        bootstrap=state.bootstrap,
        host=cs.host,
        rest_port=cs.rest_port,
        replication=state.replication,
    )
    if state.security is not None:
        _secure_worker(state, Path(cs.config))
    if pid_alive(cs.pid, state.state_dir):
        progress(f"Kafka Connect already running at {cs.url} (pid {cs.pid})")
    else:
        progress(f"starting Kafka Connect on {cs.url}…")
        main = "org.apache.kafka.connect.cli.ConnectDistributed"
        proc = launch_java(
            main, [cs.config], classpath("kafka"), settings.connect_heap, Path(cs.log), settings.java,
            state.namespace,
        )
        cs.pid = proc.pid
    state.connect = cs
    state.save()
    wait_for_connect(cs.url, timeout=timeout, log=cs.log, progress=progress)
    return cs
