"""``python -m services.demo`` (what ``make demo`` runs): settings in, report rendered, exit code out."""

from __future__ import annotations

import argparse
import logging
import sys

from rich.console import Console

from ballast.cli.connection import ConnectionSettings
from ballast.devstack.jvm import StackSettings
from ballast.kafka.client_log import quiet_retried_warnings
from ballast.kafka.topics import LayoutSettings
from ballast.settings import SettingsError
from services.demo.render import ConsoleProgress, render
from services.demo.run import run_demo
from services.demo.settings import DemoSettings


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m services.demo",
        description="Ballast's live pipeline on the local stack: router, a Mixed plan, an epoch switch, "
        "and the Spark stateful reduce moving the pinned keys live.",
    )
    ConnectionSettings.add_arguments(parser.add_argument_group("Kafka"))
    StackSettings.add_arguments(parser.add_argument_group("local stack (started when no --bootstrap)"))
    LayoutSettings.add_arguments(parser.add_argument_group("topics"))
    DemoSettings.add_arguments(parser.add_argument_group("demo"))
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        demo, connection, layout, stack = (
            DemoSettings.from_args(args),
            ConnectionSettings.from_args(args),
            LayoutSettings.from_args(args),
            StackSettings.from_args(args),
        )
    except SettingsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    # librdkafka's lines say who is talking, like every other log; the demo is one-shot, so its
    # retried warnings (a fresh broker's coordinators still loading) stay quiet, errors show
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    quiet_retried_warnings()
    console = Console()
    report = run_demo(demo, connection, layout, ConsoleProgress(console), stack)
    render(report, console)
    if demo.report_json:
        report.write_json(demo.report_json)
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
