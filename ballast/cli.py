"""The ``ballast`` command: local stack, topics and Connect; services add their own sub-commands.

Every setting comes from :mod:`ballast.settings`: each is declared once, with its flag, its
environment variable and its default, and ``-h`` lists all three. Without ``--bootstrap`` (or
``BALLAST_BOOTSTRAP_SERVERS``), commands use the stack recorded in ``--state-dir``, so
``ballast stack up`` followed by ``ballast topics create`` needs no addresses at all.

Errors a user can act on are one line, ``error: ...``, on stderr: exit code 2 for bad input (a flag's
value, a worker id, a conflicting topic), 1 for the environment (no broker, a stack or Connect that
fails). ``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from ballast.settings import (
    ConnectionSettings,
    LayoutSettings,
    Settings,
    SettingsError,
    StackSettings,
    setting,
)


class UsageError(ValueError):
    """A command-line value makes no sense (a missing file): one line, exit code 2."""


def say(message: str) -> None:
    """A progress line: stderr, so stdout stays the command's result."""
    print(message, file=sys.stderr, flush=True)


def print_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """Plain aligned columns: nothing is ever cut or wrapped, and the output greps and pipes well."""
    widths = [max(len(str(c)) for c in col) for col in zip(headers, *rows, strict=False)]
    for row in (headers, *rows):
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=False)).rstrip())


# --- stack -----------------------------------------------------------------------------------------


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
    timeout: float = setting(180.0, "seconds to wait for the cluster (and Connect) to answer", minimum=1)


def _state_dir(args: argparse.Namespace) -> Path:
    return ConnectionSettings.from_args(args).state_dir


def cmd_stack_up(args: argparse.Namespace) -> int:
    from ballast.devstack.stack import pid_alive, running_stack, start_stack

    up = StackUpSettings.from_args(args)
    jvm = StackSettings.from_args(args)
    state_dir = _state_dir(args)
    state = running_stack(state_dir)
    if state is not None and len(state.nodes) == up.brokers:
        connect_ok = state.connect is not None and pid_alive(state.connect.pid, state.state_dir)
        if connect_ok or not up.connect:
            print(f"stack already running at {state.bootstrap} (state {state.state_dir})")
            if connect_ok:
                print(f"Kafka Connect REST: {state.connect.url}")  # type: ignore[union-attr]
            return 0
    what = f"{up.brokers} broker(s){' and Kafka Connect' if up.connect else ''}"
    say(f"starting {what} in {Path(state_dir).resolve()}")
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
    )
    print(
        f"stack up in {time.monotonic() - started:.0f} s: bootstrap={state.bootstrap} state={state.state_dir}"
    )
    if state.connect:
        print(f"Kafka Connect REST: {state.connect.url}")
    return 0


def cmd_stack_status(args: argparse.Namespace) -> int:
    from ballast.devstack.stack import stack_status

    status = stack_status(_state_dir(args))  # StackError when nothing is recorded: exit 1
    if args.json:
        print(json.dumps(status, indent=2))
        return 0
    print(f"Ballast stack in {status['state_dir']} (bootstrap {status['bootstrap']})")
    rows = [
        [f"broker {n['node_id']}", f"127.0.0.1:{n['port']}", str(n["pid"]), str(n["running"]), n["log"]]
        for n in status["nodes"]  # type: ignore[attr-defined]
    ]
    if "connect" in status:
        c: Any = status["connect"]
        rows.append(["connect", c["url"], str(c["pid"]), str(c["running"]), c["log"]])
    print_table(("process", "address", "pid", "running", "log"), rows)
    return 0


def cmd_stack_down(args: argparse.Namespace) -> int:
    from ballast.devstack.stack import stop_stack

    state = stop_stack(_state_dir(args), purge=args.purge)
    print("stack stopped" if state else "no stack recorded there; nothing to stop")
    return 0


# --- topics ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TopicsSettings(Settings):
    """How ``ballast topics create`` creates topics."""

    replication: int = setting(-1, "replication factor of created topics (-1: the broker's default)")


def cmd_topics_create(args: argparse.Namespace) -> int:
    from ballast.kafka.admin import ensure_topics, make_admin

    layout = LayoutSettings.from_args(args).layout()
    replication = TopicsSettings.from_args(args).replication
    kafka = ConnectionSettings.from_args(args).checked_kafka_config("ballast-cli")
    rf = "the broker's default" if replication == -1 else str(replication)
    print(f"topics of prefix {layout.prefix!r} on {kafka.bootstrap_servers} (replication: {rf})")
    result = ensure_topics(make_admin(kafka), layout.specs(), replication=replication)
    for name, what in result.items():
        print(f"{what:8} {name}")
    return 0


def _config_text(config: dict[str, str] | None) -> str:
    return " ".join(f"{k}={v}" for k, v in sorted(config.items())) if config else "-"


def topic_report(layout, described: dict | None) -> list[dict[str, Any]]:  # layout: TopicLayout
    """Expected layout beside what the broker has (``described`` None: planned only, no broker)."""
    from ballast.kafka.topics import find_conflicts

    report = []
    for spec in layout.specs().values():
        expected_config = dict(spec.config)
        row: dict[str, Any] = {
            "role": spec.role,
            "name": spec.name,
            "expected_partitions": spec.partitions,
            "partitions": None,
            "expected_config": expected_config,
            "config": None,
            "status": "planned",
            "problems": [],
        }
        if described is not None:
            found = described.get(spec.name)
            if found is None:
                row["status"] = "missing"
            else:
                row["partitions"] = found.partitions
                row["config"] = {k: found.config.get(k) for k in expected_config}
                row["problems"] = find_conflicts(spec, found.partitions, found.config)
                row["status"] = "conflict" if row["problems"] else "ok"
        report.append(row)
    return report


def cmd_topics_list(args: argparse.Namespace) -> int:
    layout = LayoutSettings.from_args(args).layout()
    if args.planned:
        report = topic_report(layout, None)
        where = "planned, broker not asked"
    else:
        from ballast.kafka.admin import describe_topics, make_admin

        kafka = ConnectionSettings.from_args(args).checked_kafka_config("ballast-cli")
        names = [s.name for s in layout.specs().values()]
        report = topic_report(layout, describe_topics(make_admin(kafka), names))
        where = f"on {kafka.bootstrap_servers}"
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"Ballast topics of prefix {layout.prefix!r} ({where})")
    if args.planned:
        planned = [
            [s.role, s.name, str(s.partitions), _config_text(dict(s.config)), s.value_schema or "(raw)"]
            for s in layout.specs().values()
        ]
        print_table(("role", "topic", "partitions", "config Ballast relies on", "value"), planned)
        return 0
    rows = []
    for r in report:
        actual = "-" if r["partitions"] is None else str(r["partitions"])
        config = _config_text(r["expected_config"])
        if r["config"] is not None and r["config"] != r["expected_config"]:
            config += f" (has {_config_text(r['config'])})"
        rows.append([r["role"], r["name"], str(r["expected_partitions"]), actual, config, r["status"]])
    print_table(("role", "topic", "partitions", "on broker", "config Ballast relies on", "status"), rows)
    for r in report:
        for problem in r["problems"]:
            print(f"conflict: {problem}")
    missing = [r["name"] for r in report if r["status"] == "missing"]
    if missing:
        print(f"{len(missing)} topic(s) missing: run `ballast topics create` (same --prefix/--workers)")
    return 0


# --- connect ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ConnectSettings(Settings):
    """Where Kafka Connect's REST API is."""

    url: str = setting(
        "",
        "Kafka Connect REST URL (none: the local stack's worker in --state-dir)",
        env="BALLAST_CONNECT_URL",
    )


def _end_offsets(kafka, topic: str, partitions: int) -> int:  # kafka: KafkaConfig
    """Sum of the topic's end offsets: the number of records ever written (without compaction)."""
    from confluent_kafka import TopicPartition

    from ballast.kafka.clients import make_consumer

    consumer = make_consumer(kafka, "ballast-cli-offsets")
    try:
        return sum(
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1]
            for p in range(partitions)
        )
    finally:
        consumer.close()


def cmd_connect_load(args: argparse.Namespace) -> int:
    from ballast.devstack.connect import count_lines, file_source_config, load_file, source_position
    from ballast.devstack.stack import StackError, StackState
    from ballast.kafka.admin import make_admin, partition_count
    from ballast.waiting import wait_until

    file = Path(args.file)
    if not file.is_file():
        raise UsageError(f"{args.file}: no such file")
    conn = ConnectionSettings.from_args(args)
    url = ConnectSettings.from_args(args).url
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
    name, _ = file_source_config(file, topic, args.name)
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
    before = _end_offsets(kafka, topic, partitions)
    say(f"loading {lines} lines of {file} into {topic} through Kafka Connect at {url}{resumed}…")
    load_file(url, file, topic, name=name)

    def loaded() -> int:
        return _end_offsets(kafka, topic, partitions) - before

    if args.wait:
        wait_until(
            lambda: loaded() >= lines,
            args.timeout,
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


# --- parser ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CliSettings(Settings):
    """How the ``ballast`` command reports errors."""

    debug: bool = setting(False, "show the full traceback of an error", env="BALLAST_DEBUG")


def _connection_flags(p: argparse.ArgumentParser, state_only: bool = False) -> None:
    ConnectionSettings.add_arguments(p, only=("state_dir",) if state_only else None)


def _add(sub: argparse._SubParsersAction, name: str, help: str, description: str | None = None):
    parser = sub.add_parser(name, help=help, description=description or help[:1].upper() + help[1:] + ".")
    parser.set_defaults(one_shot=True)
    return parser


def quiet_client_log(args: argparse.Namespace, debug: bool) -> None:
    """One-shot commands (``one_shot`` set by their parser) show librdkafka's errors, not its warnings.

    A command that fails says so in its one error line; librdkafka's warnings about what it retries
    by itself (a transaction coordinator still loading, a refreshed leader) would only be noise there,
    so they show with ``--debug``. Services (``router run``) keep WARNING: they run for days and their
    log is where such retries belong.
    """
    from ballast.kafka.config import LIBRDKAFKA_LOGGER

    if getattr(args, "one_shot", False) and not debug:
        LIBRDKAFKA_LOGGER.setLevel(logging.ERROR)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ballast",
        description="Ballast: the local Kafka stack, topics, Kafka Connect, the control log, the services.",
        epilog="Every setting is a flag and an environment variable (see COMMAND -h). Errors are one line: "
        "exit code 2 for bad input, 1 for the environment (no broker, a failing stack); --debug shows "
        "the traceback.",
    )
    CliSettings.add_arguments(parser)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    stack = _add(sub, "stack", "the local Kafka stack (KRaft brokers, Kafka Connect) as plain processes")
    stack_sub = stack.add_subparsers(dest="action", required=True, metavar="ACTION")
    up = _add(
        stack_sub, "up", "format and start brokers (KRaft) and optionally Kafka Connect; a no-op when running"
    )
    _connection_flags(up, state_only=True)
    StackUpSettings.add_arguments(up)
    StackSettings.add_arguments(up)
    up.set_defaults(func=cmd_stack_up)
    st = _add(stack_sub, "status", "what runs, where, and the log files")
    _connection_flags(st, state_only=True)
    st.add_argument("--json", action="store_true", help="machine-readable output")
    st.set_defaults(func=cmd_stack_status)
    down = _add(stack_sub, "down", "stop the processes this state folder started")
    _connection_flags(down, state_only=True)
    down.add_argument("--purge", action="store_true", help="also delete the state folder (data and logs)")
    down.set_defaults(func=cmd_stack_down)

    topics = _add(sub, "topics", "Ballast's topics")
    topics_sub = topics.add_subparsers(dest="action", required=True, metavar="ACTION")
    create = _add(topics_sub, "create", "create missing topics; refuse conflicting ones (idempotent)")
    _connection_flags(create)
    LayoutSettings.add_arguments(create, only=("prefix", "workers", "input_partitions"))
    TopicsSettings.add_arguments(create)
    create.set_defaults(func=cmd_topics_create)
    lst = _add(
        topics_sub,
        "list",
        "the expected topic layout beside what exists on the broker",
        "The expected topic layout beside what exists on the broker: partitions, the configs Ballast "
        "relies on, and ok / missing / conflict.",
    )
    _connection_flags(lst)
    LayoutSettings.add_arguments(lst, only=("prefix", "workers", "input_partitions"))
    lst.add_argument("--json", action="store_true", help="machine-readable output: one object per topic")
    lst.add_argument("--planned", action="store_true", help="only the planned layout; no broker needed")
    lst.set_defaults(func=cmd_topics_list)

    connect = _add(sub, "connect", "Kafka Connect")
    connect_sub = connect.add_subparsers(dest="action", required=True, metavar="ACTION")
    load = _add(
        connect_sub,
        "load",
        "stream a file into the input topic with FileStreamSource",
        "Stream FILE line by line into <prefix>.input with a FileStreamSource connector, and report "
        "how many records are in (all of them with --wait).",
    )
    load.add_argument("file", metavar="FILE", help="a text file; each line becomes one record")
    _connection_flags(load)
    ConnectSettings.add_arguments(load)
    LayoutSettings.add_arguments(load, only=("prefix",))
    load.add_argument("--name", help="connector name (default: the name in deploy/connect/file-source.json)")
    load.add_argument("--wait", action="store_true", help="wait until every line of FILE is in the topic")
    load.add_argument(
        "--timeout", type=float, default=120.0, help="seconds --wait waits (default: %(default)s)"
    )
    load.set_defaults(func=cmd_connect_load)

    for register in _service_commands():
        register(sub)
    return parser


def _service_commands() -> list[Callable[[argparse._SubParsersAction], None]]:
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


def exit_code(exc: BaseException) -> int | None:
    """2 for the user's input, 1 for the environment, None for a bug (a traceback is worth it)."""
    from ballast.control.cli import UsageError as ControlUsageError
    from ballast.control.state import ControlLogError
    from ballast.devstack.connect import ConnectError
    from ballast.devstack.stack import StackError
    from ballast.kafka.admin import BrokerUnreachable, TopicConflictError, TopicMissingError
    from ballast.paths import MissingJarsError
    from ballast.waiting import WaitTimeout

    user = (SettingsError, UsageError, ControlUsageError, TopicConflictError)
    if isinstance(exc, (*user, ControlLogError)):
        return 2
    environment = (
        BrokerUnreachable,
        TopicMissingError,
        StackError,
        ConnectError,
        MissingJarsError,
        WaitTimeout,
    )
    return 1 if isinstance(exc, environment) else None


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        debug = CliSettings.from_args(args).debug
    except SettingsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    quiet_client_log(args, debug)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        code = exit_code(exc)
        if debug:
            traceback.print_exc()
        elif code is None:
            print(f"error: {type(exc).__name__}: {exc} (run with --debug for the traceback)", file=sys.stderr)
        else:
            print(f"error: {exc}", file=sys.stderr)
        return code if code is not None else 1


if __name__ == "__main__":
    sys.exit(main())
