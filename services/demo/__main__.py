"""``python -m services.demo`` (what ``make demo`` runs): settings in, the demo run, the report
written, the verdict printed, exit code out (0: every check held; 1: one did not, or a service
failed; 2: bad settings; 130: interrupted)."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from rich.console import Console

from ballast.cli.connection import ConnectionSettings
from ballast.devstack.cli import ConnectSettings
from ballast.devstack.jvm import StackSettings
from ballast.kafka.client_log import quiet_retried_warnings
from ballast.kafka.topics import LayoutSettings
from ballast.settings import SettingsError
from services.demo.html_report import write_report
from services.demo.run import run_demo
from services.demo.settings import DemoSettings
from services.demo.summary import DemoSummary
from services.demo.view import DemoView


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m services.demo",
        description="Ballast's whole pipeline as services (routers, controller, Spark reduce, shedder) on a "
        "Zipf stream whose hot set shifts, with an overload burst; run with Ballast and with hash-only "
        "routing at the same time, checked against a reference, reported in demo-report/index.html.",
    )
    ConnectionSettings.add_arguments(parser.add_argument_group("Kafka"))
    ConnectSettings.add_arguments(parser.add_argument_group("Kafka Connect"), only=("url",))
    StackSettings.add_arguments(parser.add_argument_group("local stack (started when no --bootstrap)"))
    LayoutSettings.add_arguments(parser.add_argument_group("topics"), only=("prefix",))
    DemoSettings.add_arguments(parser.add_argument_group("demo"))
    return parser


def print_verdict(summary: DemoSummary, report: Path, console: Console) -> None:
    console.print()
    for v in summary.verdicts:
        mark = "[green]PASS[/green]" if v.ok else "[red]FAIL[/red]"
        console.print(f"{mark} {v.check}: {v.detail}", soft_wrap=True)
    if summary.failure:
        f = summary.failure
        where = f" (log: {f['log']})" if f.get("log") else ""
        console.print(f"[red]stopped early[/red]: {f.get('service') or 'the demo'}: {f['reason']}{where}")
    word = "[green]demo OK[/green]" if summary.ok else "[red]demo FAILED[/red]"
    console.print(f"{word} in {summary.duration_s:.0f} s; report: {report}")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        demo, connection, layout, stack = (
            DemoSettings.from_args(args),
            ConnectionSettings.from_args(args),
            LayoutSettings.from_args(args),
            StackSettings.from_args(args),
        )
        connect = ConnectSettings.from_args(args)
    except SettingsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    quiet_retried_warnings()
    console = Console()
    with DemoView(console, demo.live and console.is_terminal) as view:
        summary = run_demo(demo, connection, layout, stack, connect.url, view)
    report = write_report(summary, Path(demo.report_dir))
    print_verdict(summary, report, console)
    if summary.failure and summary.failure["reason"].startswith("interrupted"):
        return 130
    return 0 if summary.ok else 1


if __name__ == "__main__":
    sys.exit(main())
