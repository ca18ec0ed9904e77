"""``ballast stack up|status|down`` and ``ballast connect load``: the local stack from the command line.

``stack up --spark`` on a stack that already runs adds the Spark cluster to it (brokers and Connect
are left as they are), the same way ``--connect`` adds a Connect worker: asking for more of a
running stack is the common case, and nothing it already runs needs a restart for it.

Why the library does not print: :func:`~ballast.devstack.stack.start_stack` reports progress
through a callback; these commands turn it into stderr lines and print results on stdout.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from ballast.cli.connection import ConnectionSettings
from ballast.cli.console import UsageError, add_command, print_table, say
from ballast.devstack.brokers import start_node, stop_node, wait_for_cluster
from ballast.devstack.connect import count_lines, file_source_config, load_file, source_position
from ballast.devstack.jvm import StackSettings
from ballast.devstack.pipeline import PipelineSettings, scale_reduce, scale_routers, start_pipeline
from ballast.devstack.processes import pid_alive
from ballast.devstack.security import stack_admin
from ballast.devstack.services import is_running
from ballast.devstack.spark_cluster import SparkSettings, spark_running, workers_text
from ballast.devstack.stack import running_stack, stack_status, start_stack, stop_stack
from ballast.devstack.state import StackError, StackState
from ballast.kafka.admin import make_admin, partition_count
from ballast.kafka.reading import records_written
from ballast.kafka.topics import LayoutSettings, TopicLayout
from ballast.settings import Settings, setting
from ballast.waiting import wait_until


def _state_dir(args: argparse.Namespace) -> Path:
    return ConnectionSettings.from_args(args).state_dir


@dataclass(frozen=True)
class StackUpSettings(Settings):
    """What ``ballast stack up`` starts."""

    ENV_PREFIX: ClassVar[str] = "BALLAST_STACK_"

    brokers: int = setting(
        1, "brokers (KRaft, each also a controller voter); 3 gives replication 3", choices=(1, 3)
    )
    connect: bool = setting(False, "also start a Kafka Connect worker (distributed mode)")
    port: int = setting(0, "first broker port; more brokers use port+1, port+2 (0: free ports)", minimum=0)
    connect_port: int = setting(0, "Kafka Connect REST port (0: a free port)", minimum=0)
    spark: bool = setting(False, "also start a Spark standalone master and workers (loopback)")
    spark_workers: int = setting(2, "Spark workers started with --spark", minimum=1)
    timeout: float = setting(180.0, "seconds to wait for brokers (and Connect, Spark) to answer", minimum=1)
    secure: bool = setting(
        False,
        "SASL_SSL (SCRAM-SHA-512) for clients, TLS between brokers, ACLs enforced: a user per service, "
        "passwords in <state-dir>/security, the prefix's ACLs applied (docs/security.md)",
    )


def cmd_stack_up(args: argparse.Namespace) -> int:
    up = StackUpSettings.from_args(args)
    jvm = StackSettings.from_args(args)
    pipeline = PipelineSettings.from_args(args)
    layout = LayoutSettings.from_args(args)
    state_dir = _state_dir(args)
    state = running_stack(state_dir)
    if state is not None and len(state.nodes) == up.brokers:
        connect_ok = state.connect is not None and pid_alive(state.connect.pid, state.state_dir)
        spark_ok = spark_running(state) and len(state.spark.workers) == up.spark_workers  # type: ignore[union-attr]
        if (connect_ok or not up.connect) and (spark_ok or not up.spark):
            print(f"stack already running at {state.bootstrap} (state {state.state_dir})")
            if pipeline.pipeline:
                start_pipeline(state, layout, pipeline, say)
            _print_services(state)
            return 0
    parts = [f"{up.brokers} broker(s)"]
    if up.connect:
        parts.append("Kafka Connect")
    if up.spark:
        parts.append(f"Spark (master and {workers_text(up.spark_workers)})")
    if pipeline.pipeline:
        reduce = " and the reduce" if pipeline.reduce else ""
        parts.append(f"the pipeline ({pipeline.routers} router(s){reduce})")
    say(f"starting {', '.join(parts)} in {Path(state_dir).resolve()}")
    started = time.monotonic()
    state = start_stack(
        state_dir,
        brokers=up.brokers,
        connect=up.connect,
        ports=[up.port + i for i in range(up.brokers)] if up.port else None,
        connect_port=up.connect_port or None,
        timeout=up.timeout,
        settings=jvm,
        progress=say,
        spark=up.spark,
        spark_workers=up.spark_workers,
        spark_settings=SparkSettings.from_args(args),
        secure=up.secure,
    )
    if state.security is not None:
        grant_stack(state, layout.layout())
    if pipeline.pipeline:
        start_pipeline(state, layout, pipeline, say)
    print(
        f"stack up in {time.monotonic() - started:.0f} s: bootstrap={state.bootstrap} state={state.state_dir}"
    )
    _print_services(state)
    return 0


def grant_stack(state: StackState, layout: TopicLayout) -> None:
    """A secured stack's ACLs for ``layout``'s prefix, applied as its admin (idempotent)."""
    from ballast.deployment.acls import Principals
    from ballast.deployment.create import grant_deployment

    admin = stack_admin(state, "ballast-stack")
    created, present = grant_deployment(admin, layout, Principals())
    say(f"ACLs of prefix {layout.prefix!r}: {created} created, {present} already present")
    say(
        f"secured: SASL_SSL {state.security.mechanism} on {state.bootstrap}; CA and passwords in "  # type: ignore[union-attr]
        f"{state.security.folder} (commands given --state-dir connect as admin)"  # type: ignore[union-attr]
    )


def _print_services(state: StackState) -> None:
    """The addresses of what runs besides the brokers (those are on the line before)."""
    if state.connect and pid_alive(state.connect.pid, state.state_dir):
        print(f"Kafka Connect REST: {state.connect.url}")
    if state.spark and spark_running(state):
        spark = state.spark
        workers = workers_text(len(spark.workers))
        print(f"Spark master: {spark.master_url} (web UI {spark.master.ui}, {workers})")
    for service in state.services:
        if is_running(state, service):
            print(f"{service.kind} service {service.name}: pid {service.pid}, log {service.log}")


def cmd_stack_status(args: argparse.Namespace) -> int:
    status = stack_status(_state_dir(args))  # StackError when nothing is recorded: exit 1
    if args.json:
        print(json.dumps(status, indent=2))
        return 0
    print(f"Ballast stack in {status['state_dir']} (bootstrap {status['bootstrap'] or 'none: no brokers'})")
    rows = [
        [f"broker {n['node_id']}", n["address"], str(n["pid"]), str(n["running"]), n["log"]]
        for n in status["nodes"]  # type: ignore[attr-defined]
    ]
    if "connect" in status:
        c: Any = status["connect"]
        rows.append(["connect", c["url"], str(c["pid"]), str(c["running"]), c["log"]])
    spark: Any = status.get("spark")
    if spark:
        rows += _spark_rows(spark)
    for svc in status.get("services", []):  # type: ignore[attr-defined]
        running = f"True ({'ready' if svc['ready'] else 'starting'})" if svc["running"] else "False"
        if not svc["running"] and svc["exit_code"] is not None:
            running += f" (exit {svc['exit_code']})"
        rows.append([f"{svc['kind']} {svc['name']}", "-", str(svc["pid"]), running, svc["log"]])
    print_table(("process", "address", "pid", "running", "log"), rows)
    if spark and spark["running"]:
        print(
            f"Spark web UI {spark['web_ui']}: "
            f"{spark['alive_workers']} of {len(spark['workers'])} workers ALIVE"
        )
    return 0


def _spark_rows(spark: dict[str, Any]) -> list[list[str]]:
    """Status rows of the Spark daemons; "running" also says what the master reports, since a
    worker can run without being registered (yet)."""

    def running(process: dict[str, Any], said: str | None) -> str:
        return f"True ({said or 'no answer'})" if process["running"] else "False"

    master = running(spark, spark["status"])
    rows = [["spark master", spark["master_url"], str(spark["pid"]), master, spark["log"]]]
    for w in spark["workers"]:
        state = running(w, w["state"] or "not registered")
        rows.append([f"spark worker {w['worker_id']}", w["address"], str(w["pid"]), state, w["log"]])
    return rows


def _recorded_node(args: argparse.Namespace) -> tuple[StackState, int]:
    state = StackState.load(_state_dir(args))
    try:
        state.node(args.node)
    except KeyError:
        ids = ", ".join(str(n.node_id) for n in state.nodes)
        where = f"in the stack at {state.state_dir} (brokers: {ids})"
        raise UsageError(f"no broker {args.node} {where}") from None
    return state, args.node


def _scaled_stack(args: argparse.Namespace) -> StackState:
    """The running stack a scale command acts on (the controller's hooks in the local stack)."""
    state = running_stack(_state_dir(args))
    if state is None:
        raise StackError(f"no stack runs in {_state_dir(args)}: start it with `ballast stack up`")
    return state


def cmd_stack_scale_routers(args: argparse.Namespace) -> int:
    settings = PipelineSettings(ready_timeout=args.ready_timeout)
    started, stopped = scale_routers(
        _scaled_stack(args), LayoutSettings.from_args(args), args.count, settings, say
    )
    print(f"routers: {args.count} running (started {', '.join(started) or 'none'}; "
          f"stopped {', '.join(stopped) or 'none'})")  # fmt: skip
    return 0


def cmd_stack_scale_reduce(args: argparse.Namespace) -> int:
    settings = PipelineSettings(ready_timeout=args.ready_timeout)
    started = scale_reduce(_scaled_stack(args), LayoutSettings.from_args(args), args.cores, settings, say)
    print(f"reduce: running on {args.cores} cores (pid {started.pid})")
    return 0


def cmd_stack_kill_broker(args: argparse.Namespace) -> int:
    """kill -9 one broker of the stack, found by its recorded pid (a machine failure, for fault tests)."""
    state, node_id = _recorded_node(args)
    pid = state.node(node_id).pid
    if not pid_alive(pid, state.state_dir):
        print(f"broker {node_id} is not running")
        return 0
    stop_node(state, node_id, hard=True)
    print(f"broker {node_id} killed (pid {pid}); `ballast stack start-broker {node_id}` starts it again")
    return 0


def cmd_stack_start_broker(args: argparse.Namespace) -> int:
    """Start one recorded broker again on its data, and wait until the cluster has all its brokers."""
    state, node_id = _recorded_node(args)
    start_node(state, node_id, StackSettings.from_args(args), say)
    wait_for_cluster(state.bootstrap, len(state.nodes), args.timeout, [state.node(node_id).log], say)
    print(f"broker {node_id} running (pid {state.node(node_id).pid}); {len(state.nodes)} brokers answer")
    return 0


def cmd_stack_down(args: argparse.Namespace) -> int:
    state = stop_stack(_state_dir(args), purge=args.purge)
    print("stack stopped" if state else "no stack recorded there; nothing to stop")
    return 0


@dataclass(frozen=True)
class ConnectSettings(Settings):
    """Where Kafka Connect's REST API is, and how ``connect load`` names and waits for its connector."""

    ENV_PREFIX: ClassVar[str] = "BALLAST_CONNECT_"

    url: str = setting("", "Kafka Connect REST URL (none: the local stack's worker in --state-dir)")
    name: str = setting(
        "", "connector name (none: the name in ballast/devstack/conf/connect/file-source.json)"
    )
    timeout: float = setting(120.0, "seconds --wait waits for every line to arrive", minimum=1)


def cmd_connect_load(args: argparse.Namespace) -> int:
    file = Path(args.file)
    if not file.is_file():
        raise UsageError(f"{args.file}: no such file")
    conn = ConnectionSettings.from_args(args)
    connect = ConnectSettings.from_args(args)
    url = connect.url
    if not url:
        state = StackState.load(conn.state_dir)
        if not state.connect:
            raise StackError(
                f"the stack in {conn.state_dir} has no Connect worker; run `ballast stack up --connect`"
            )
        url = state.connect.url
    topic = LayoutSettings.from_args(args).layout().name("input")
    kafka = conn.checked_kafka_config("ballast-cli")
    partitions = partition_count(make_admin(kafka), topic, timeout=5)
    name, _ = file_source_config(file, topic, connect.name or None)
    # Connect resumes a connector at its stored position: only the lines after it are new
    position = source_position(url, name, file)
    lines = count_lines(file, position)
    if position and not lines:
        print(
            f"connector {name} has already loaded every line of {file} (Connect keeps its position); "
            "pass another --name to load the file again"
        )
        return 0
    resumed = f" (connector {name} resumes at byte {position})" if position else ""
    before = records_written(kafka, topic, partitions)
    say(f"loading {lines} lines of {file} into {topic} through Kafka Connect at {url}{resumed}…")
    load_file(url, file, topic, name=name)

    def loaded() -> int:
        return records_written(kafka, topic, partitions) - before

    if args.wait:
        wait_until(
            lambda: loaded() >= lines,
            connect.timeout,
            f"{lines} lines of {file} in {topic}",
            interval=0.5,
            describe=lambda: f"{loaded()} records in",
        )
        print(f"connector {name}: {loaded()} records loaded into {topic} ({lines} lines of {file})")
    else:
        print(
            f"connector {name} streams {file} into {topic}: {loaded()} of {lines} records in so far "
            "(pass --wait to wait for all)"
        )
    return 0


def register_stack(sub: argparse._SubParsersAction) -> None:
    """Add ``stack`` to the ``ballast`` command."""
    stack = add_command(
        sub, "stack", "the local stack (KRaft brokers, Kafka Connect, Spark) as plain processes"
    )
    stack_sub = stack.add_subparsers(dest="action", required=True, metavar="ACTION")
    up = add_command(
        stack_sub,
        "up",
        "start brokers (KRaft), optionally Kafka Connect and Spark; a running stack gets what it lacks",
    )
    ConnectionSettings.add_arguments(up, only=("state_dir",))
    StackUpSettings.add_arguments(up)
    StackSettings.add_arguments(up)
    SparkSettings.add_arguments(up)
    PipelineSettings.add_arguments(up.add_argument_group("Ballast's services (--pipeline)"))
    LayoutSettings.add_arguments(up.add_argument_group("topic layout of the pipeline"))
    up.set_defaults(func=cmd_stack_up)
    st = add_command(stack_sub, "status", "what runs, where, and the log files")
    ConnectionSettings.add_arguments(st, only=("state_dir",))
    st.add_argument("--json", action="store_true", help="machine-readable output")
    st.set_defaults(func=cmd_stack_status)
    down = add_command(
        stack_sub, "down", "stop the processes this state folder started: services, Spark, Connect, brokers"
    )
    ConnectionSettings.add_arguments(down, only=("state_dir",))
    down.add_argument("--purge", action="store_true", help="also delete the state folder (data and logs)")
    down.set_defaults(func=cmd_stack_down)
    _add_scale_command(
        stack_sub, "scale-routers",
        "run N routers of the pipeline: start the missing ones, stop those above N (the controller's "
        "--router-hook for the local stack)",
        "count", "routers to run (router-1 ... router-N)", "seconds each may take to be ready (default: 300)",
        cmd_stack_scale_routers,
    )  # fmt: skip
    _add_scale_command(
        stack_sub, "scale-reduce",
        "restart the pipeline's reduce on N cores, from its checkpoint (the controller's --reduce-hook "
        "for the local stack)",
        "cores", "local task slots, or cluster cores", "seconds it may take to be ready (default: 300)",
        cmd_stack_scale_reduce,
    )  # fmt: skip
    kill = add_command(
        stack_sub, "kill-broker", "kill -9 one broker of the stack (its recorded pid): a node failure"
    )
    ConnectionSettings.add_arguments(kill, only=("state_dir",))
    kill.add_argument("node", type=int, metavar="N", help="the broker's node id (1, 2 or 3)")
    kill.set_defaults(func=cmd_stack_kill_broker)
    start = add_command(
        stack_sub, "start-broker", "start one recorded broker again on its data and wait for the cluster"
    )
    ConnectionSettings.add_arguments(start, only=("state_dir",))
    StackSettings.add_arguments(start)
    start.add_argument("node", type=int, metavar="N", help="the broker's node id (1, 2 or 3)")
    start.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for the cluster")
    start.set_defaults(func=cmd_stack_start_broker)


def _add_scale_command(
    stack_sub: argparse._SubParsersAction,
    name: str,
    about: str,
    dest: str,
    n_help: str,
    ready_help: str,
    func: Any,
) -> None:
    """A ``stack scale-…`` command: the state folder, N, a ready timeout and the pipeline's layout."""
    scale = add_command(stack_sub, name, about)
    ConnectionSettings.add_arguments(scale, only=("state_dir",))
    scale.add_argument(dest, type=int, metavar="N", help=n_help)
    scale.add_argument("--ready-timeout", type=float, default=300.0, help=ready_help)
    LayoutSettings.add_arguments(scale.add_argument_group("topic layout of the pipeline"))
    scale.set_defaults(func=func)


def register_connect(sub: argparse._SubParsersAction) -> None:
    """Add ``connect`` to the ``ballast`` command."""
    connect = add_command(sub, "connect", "Kafka Connect")
    connect_sub = connect.add_subparsers(dest="action", required=True, metavar="ACTION")
    load = add_command(
        connect_sub,
        "load",
        "stream a file into the input topic with FileStreamSource",
        "Stream FILE line by line into <prefix>.input with a FileStreamSource connector, and report "
        "how many records are in (all of them with --wait).",
    )
    load.add_argument("file", metavar="FILE", help="a text file; each line becomes one record")
    ConnectionSettings.add_arguments(load)
    ConnectSettings.add_arguments(load)
    LayoutSettings.add_arguments(load, only=("prefix",))
    load.add_argument("--wait", action="store_true", help="wait until every line of FILE is in the topic")
    load.set_defaults(func=cmd_connect_load)
