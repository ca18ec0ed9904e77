"""A Kafka Connect worker (distributed mode) as a plain process against the local stack's brokers.

Why apart from :mod:`ballast.devstack.connect`: that module talks to a running worker over REST
(any worker, ours or a user's); this one starts ours. The worker's config comes from
``deploy/connect/connect-distributed.properties.tmpl``.
"""

from __future__ import annotations

from pathlib import Path

from ballast.devstack.connect import wait_for_connect
from ballast.devstack.jvm import StackSettings, launch_java
from ballast.devstack.processes import Progress, free_port, pid_alive, quiet, render_template
from ballast.devstack.state import ConnectState, StackState
from ballast.paths import DEPLOY_DIR, classpath


def start_connect(
    state: StackState,
    rest_port: int | None = None,
    timeout: float = 180.0,
    settings: StackSettings | None = None,
    progress: Progress = quiet,
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
    render_template(
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
        proc = launch_java(
            main, [cs.config], classpath("kafka"), settings.connect_heap, Path(cs.log), settings.java
        )
        cs.pid = proc.pid
    state.connect = cs
    state.save()
    wait_for_connect(cs.url, timeout=timeout, log=cs.log, progress=progress)
    return cs
