"""The ``ballast`` command: local stack, topics and Connect; services add their own sub-commands.

Every knob is a flag, and the flags that name a connection also read an environment variable
(``BALLAST_BOOTSTRAP_SERVERS``, ``BALLAST_STATE_DIR``, ``BALLAST_CONNECT_URL``). When neither is
given, commands use the stack recorded in the state folder, so ``ballast stack up`` followed by
``ballast topics create`` needs no addresses at all.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from ballast.devstack.connect import ConnectError
from ballast.devstack.stack import StackError
from ballast.paths import DEFAULT_STATE_DIR, MissingJarsError

console = Console()


def _state_dir(args: argparse.Namespace) -> Path:
    return Path(args.state_dir or os.environ.get("BALLAST_STATE_DIR") or DEFAULT_STATE_DIR)


def resolve_bootstrap(args: argparse.Namespace) -> str:
    """Flag, then environment, then the recorded local stack, then 127.0.0.1:9092."""
    if getattr(args, "bootstrap", None):
        return str(args.bootstrap)
    if os.environ.get("BALLAST_BOOTSTRAP_SERVERS"):
        return os.environ["BALLAST_BOOTSTRAP_SERVERS"]
    from ballast.devstack.stack import StackError, StackState

    try:
        return StackState.load(_state_dir(args)).bootstrap
    except StackError:
        return "127.0.0.1:9092"


def _layout(args: argparse.Namespace):  # -> TopicLayout
    from ballast.kafka.topics import TopicLayout

    return TopicLayout(
        prefix=args.prefix,
        workers=args.workers,
        input_partitions=args.input_partitions,
    )


# --- stack -----------------------------------------------------------------------------------------


def cmd_stack_up(args: argparse.Namespace) -> int:
    from ballast.devstack.stack import start_stack

    ports = [args.port + i for i in range(args.brokers)] if args.port else None
    with console.status(f"starting {args.brokers} broker(s){' and Connect' if args.connect else ''}…"):
        state = start_stack(
            _state_dir(args),
            brokers=args.brokers,
            connect=args.connect,
            ports=ports,
            connect_port=args.connect_port,
            timeout=args.timeout,
        )
    console.print(f"[green]stack up[/] bootstrap={state.bootstrap} state={state.state_dir}")
    if state.connect:
        console.print(f"Kafka Connect REST: {state.connect.url}")
    return 0


def cmd_stack_status(args: argparse.Namespace) -> int:
    from ballast.devstack.stack import StackError, stack_status

    try:
        status = stack_status(_state_dir(args))
    except StackError as exc:
        console.print(str(exc))
        return 1
    if args.json:
        print(json.dumps(status, indent=2))
        return 0
    table = Table(title=f"Ballast stack {status['state_dir']}")
    for col in ("process", "address", "pid", "running", "log"):
        table.add_column(col)
    for n in status["nodes"]:  # type: ignore[union-attr]
        table.add_row(
            f"broker {n['node_id']}", f"127.0.0.1:{n['port']}", str(n["pid"]), str(n["running"]), n["log"]
        )
    if "connect" in status:
        c = status["connect"]
        table.add_row("connect", c["url"], str(c["pid"]), str(c["running"]), c["log"])  # type: ignore[index]
    console.print(table)
    return 0


def cmd_stack_down(args: argparse.Namespace) -> int:
    from ballast.devstack.stack import stop_stack

    state = stop_stack(_state_dir(args), purge=args.purge)
    console.print("stack stopped" if state else "no stack recorded there; nothing to stop")
    return 0


# --- topics ----------------------------------------------------------------------------------------


def cmd_topics_create(args: argparse.Namespace) -> int:
    from ballast.kafka.clients import make_admin
    from ballast.kafka.config import KafkaConfig
    from ballast.kafka.topics import TopicConflictError, ensure_topics

    admin = make_admin(KafkaConfig(bootstrap_servers=resolve_bootstrap(args)))
    try:
        result = ensure_topics(admin, _layout(args).specs(), replication=args.replication)
    except TopicConflictError as exc:
        console.print(f"[red]error:[/] {exc}")
        return 2
    for name, what in result.items():
        console.print(f"{what:8} {name}")
    return 0


def cmd_topics_list(args: argparse.Namespace) -> int:
    table = Table(title="Ballast topics")
    for col in ("role", "topic", "partitions", "config", "value schema", "what it holds"):
        table.add_column(col)
    for spec in _layout(args).specs().values():
        conf = ", ".join(f"{k}={v}" for k, v in spec.config.items())
        table.add_row(
            spec.role, spec.name, str(spec.partitions), conf, spec.value_schema or "(raw)", spec.doc
        )
    console.print(table)
    return 0


# --- connect ---------------------------------------------------------------------------------------


def cmd_connect_load(args: argparse.Namespace) -> int:
    from ballast.devstack.connect import load_file
    from ballast.devstack.stack import StackError, StackState

    url = args.url or os.environ.get("BALLAST_CONNECT_URL")
    if not url:
        try:
            state = StackState.load(_state_dir(args))
        except StackError as exc:
            console.print(f"[red]error:[/] {exc}")
            return 2
        if not state.connect:
            console.print(
                "[red]error:[/] the local stack has no Connect worker; run `ballast stack up --connect`"
            )
            return 2
        url = state.connect.url
    topic = args.topic or _layout(args).name("input")
    name = load_file(url, args.file, topic, name=args.name)
    console.print(f"connector {name} streams {args.file} into {topic}")
    return 0


# --- parser ----------------------------------------------------------------------------------------


def _add_layout_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--prefix", default=os.environ.get("BALLAST_TOPIC_PREFIX", "ballast"), help="topic name prefix"
    )
    p.add_argument(
        "--workers",
        type=int,
        default=int(os.environ.get("BALLAST_WORKERS", "8")),
        help="logical workers = routed topic partitions (fixed once Spark has state)",
    )
    p.add_argument(
        "--input-partitions", type=int, default=int(os.environ.get("BALLAST_INPUT_PARTITIONS", "4"))
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ballast", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--state-dir", help=f"local stack folder (env BALLAST_STATE_DIR, default {DEFAULT_STATE_DIR})"
    )
    sub = parser.add_subparsers(dest="command", required=True)

    stack = sub.add_parser("stack", help="the embedded local Kafka stack").add_subparsers(
        dest="action", required=True
    )
    up = stack.add_parser("up", help="format and start brokers (KRaft) and optionally Kafka Connect")
    up.add_argument("--brokers", type=int, choices=(1, 3), default=1)
    up.add_argument(
        "--connect", action="store_true", help="also start a Kafka Connect worker (distributed mode)"
    )
    up.add_argument(
        "--port",
        type=int,
        default=None,
        help="first broker port (next brokers use port+1, port+2); default: free ports",
    )
    up.add_argument("--connect-port", type=int, default=None, help="Connect REST port (default: a free port)")
    up.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for the cluster")
    up.set_defaults(func=cmd_stack_up)
    st = stack.add_parser("status", help="what runs, where, and the log files")
    st.add_argument("--json", action="store_true")
    st.set_defaults(func=cmd_stack_status)
    down = stack.add_parser("down", help="stop the processes this state folder started")
    down.add_argument("--purge", action="store_true", help="also delete the state folder (data and logs)")
    down.set_defaults(func=cmd_stack_down)

    topics = sub.add_parser("topics", help="Ballast's topics").add_subparsers(dest="action", required=True)
    create = topics.add_parser("create", help="create missing topics; refuse conflicting ones (idempotent)")
    create.add_argument("--bootstrap", help="bootstrap servers (env BALLAST_BOOTSTRAP_SERVERS)")
    create.add_argument("--replication", type=int, default=-1, help="replication factor (-1: broker default)")
    _add_layout_flags(create)
    create.set_defaults(func=cmd_topics_create)
    lst = topics.add_parser("list", help="print the topic layout")
    _add_layout_flags(lst)
    lst.set_defaults(func=cmd_topics_list)

    connect = sub.add_parser("connect", help="Kafka Connect").add_subparsers(dest="action", required=True)
    load = connect.add_parser("load", help="stream a file into the input topic with FileStreamSource")
    load.add_argument("file")
    load.add_argument("--url", help="Connect REST URL (env BALLAST_CONNECT_URL; default: the local stack's)")
    load.add_argument("--topic", help="target topic (default: the input topic)")
    load.add_argument("--name", help="connector name (default from deploy/connect/file-source.json)")
    _add_layout_flags(load)
    load.set_defaults(func=cmd_connect_load)

    for register in _service_commands():
        register(sub)
    return parser


def _service_commands() -> list:
    """Sub-commands contributed by services (router, controller, ...), when they are installed."""
    hooks = []
    for module in (
        "ballast.control.cli",
        "services.router.cli",
        "services.controller.cli",
        "services.shedder.cli",
    ):
        try:
            mod = __import__(module, fromlist=["register"])
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise
            continue
        hooks.append(mod.register)
    return hooks


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except MissingJarsError as exc:
        console.print(f"[red]error:[/] {exc}")
        return 2
    except (StackError, ConnectError) as exc:
        console.print(f"[red]error:[/] {exc}")
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
