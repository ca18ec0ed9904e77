"""The ``ballast`` command: finds the sub-commands of each concern and service, maps errors to exit codes.

Each concern keeps its sub-commands beside its code (``ballast/devstack/cli.py``,
``ballast/deployment/cli.py``, ``ballast/control/cli.py``, ``services/router/cli.py``) and declares
them as entry points (:mod:`ballast.cli.commands`); this module imports none of them, so the
library never imports a service.

Every setting comes from :mod:`ballast.settings`: each is declared once, with its flag, its
environment variable and its default, and ``-h`` lists all three. Without ``--bootstrap`` (or
``BALLAST_BOOTSTRAP_SERVERS``), commands use the stack recorded in ``--state-dir``, so
``ballast stack up`` followed by ``ballast topics create`` needs no addresses at all.

Errors a user can act on are one line, ``error: ...``, on stderr: exit code 2 for bad input (a flag's
value, a worker id, a conflicting topic, flags that contradict the control log's genesis), 1 for the
environment (no broker, a stack or Connect that fails, a missing topic or genesis). ``--debug`` shows
the traceback instead. A command whose optional dependency is not installed (``pip install ballast``
without ``[spark]``) says which extra brings it, whether its flags or its run need it, and the
other commands work (:mod:`ballast.cli.commands`).

Two flags belong to ``ballast`` itself, before the command: ``--version``, and ``--jars-dir``, the
folder of the Maven-resolved jars (:class:`ballast.paths.JarSettings`; a pip install has none).
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import os
import signal
import sys
import traceback
from dataclasses import dataclass

from ballast import __version__
from ballast.cli.commands import missing_dependency, registered_commands
from ballast.cli.console import EnvironmentProblem, UsageError
from ballast.paths import JarSettings
from ballast.settings import Settings, SettingsError, setting


@dataclass(frozen=True)
class CliSettings(Settings):
    """How the ``ballast`` command reports errors."""

    debug: bool = setting(False, "show the full traceback of an error", env="BALLAST_DEBUG")


def quiet_client_log(args: argparse.Namespace, debug: bool) -> None:
    """One-shot commands (``one_shot`` set by their parser) show librdkafka's errors, not its
    warnings, unless ``--debug``; services (``router run``) keep WARNING."""
    from ballast.kafka.client_log import quiet_retried_warnings

    if getattr(args, "one_shot", False) and not debug:
        quiet_retried_warnings()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ballast",
        description="Ballast: the local Kafka stack, topics, Kafka Connect, the control log, the services.",
        epilog="Every setting is a flag and an environment variable (see COMMAND -h). Errors are one line: "
        "exit code 2 for bad input, 1 for the environment (no broker, a failing stack); --debug shows "
        "the traceback.",
    )
    parser.add_argument("--version", action="version", version=f"ballast {__version__}")
    CliSettings.add_arguments(parser)
    JarSettings.add_arguments(parser)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    for command in registered_commands():
        command.register(sub)
    return parser


def exit_code(exc: BaseException) -> int | None:
    """2 for the user's input, 1 for the environment, None for a bug (a traceback is worth it)."""
    from ballast.control.genesis import GenesisMissingError
    from ballast.control.state import ControlLogError
    from ballast.devstack.connect import ConnectError
    from ballast.devstack.state import StackError
    from ballast.kafka.admin import BrokerUnreachable, TopicConflictError, TopicMissingError
    from ballast.paths import MissingJarsError
    from ballast.waiting import WaitTimeout

    if isinstance(exc, GenesisMissingError):
        return 1  # like a missing topic: `ballast topics create` sets it up
    user = (SettingsError, UsageError, TopicConflictError)
    if isinstance(exc, (*user, ControlLogError)):
        return 2
    environment = (
        EnvironmentProblem,
        BrokerUnreachable,
        TopicMissingError,
        StackError,
        ConnectError,
        MissingJarsError,
        WaitTimeout,
    )
    return 1 if isinstance(exc, environment) else None


def export_jars_dir(args: argparse.Namespace) -> None:
    """``--jars-dir`` as ``BALLAST_JARS_DIR``: :func:`ballast.paths.jar_dir` reads it wherever the
    jars are needed, in this process and in every process it starts (brokers, services, the
    reduce's driver under spark-submit), so the flag is passed through nothing."""
    given = getattr(args, "jars_dir", None)
    if given is not None:
        os.environ[JarSettings.env_name("jars_dir")] = os.path.abspath(given)


def main(argv: list[str] | None = None) -> int:
    # `kill -USR1 <pid>` writes every thread's stack to stderr (a service's log) and goes on: how a
    # service that stopped making progress without a word is looked into (the fault campaign does)
    with contextlib.suppress(AttributeError, OSError, ValueError):  # a captured stderr has no file
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    args = build_parser().parse_args(argv)
    try:
        debug = CliSettings.from_args(args).debug
        export_jars_dir(args)
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
        missing = missing_dependency(exc)  # an optional dependency imported when the command runs
        if debug:
            traceback.print_exc()
        elif missing is not None:
            print(f"error: `ballast {args.command}` {missing}", file=sys.stderr)
            return 1
        elif code is None:
            print(f"error: {type(exc).__name__}: {exc} (run with --debug for the traceback)", file=sys.stderr)
        else:
            print(f"error: {exc}", file=sys.stderr)
        return code if code is not None else 1


if __name__ == "__main__":
    sys.exit(main())
