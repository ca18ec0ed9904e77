"""``ballast status``: what a running deployment is doing, from its metrics topic and control log.

Why it needs no flag for the number of workers: the routed topic's partition count is the number
of workers (``ballast.kafka.topics``), so the command reads it from the broker. With nothing
published in the window read (no service runs), it says so and exits 1.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from typing import ClassVar

from ballast.cli.connection import ConnectionSettings
from ballast.cli.console import add_command
from ballast.kafka.topics import LayoutSettings, TopicLayout
from ballast.settings import Settings, setting

DESCRIPTION = """What a running deployment is doing, as its services publish it: the epoch and routing
table (control log), per-worker load and imbalance, migration in flight and the last decision (the
controller), time lag per stage (the shedder), the reduce's newest micro-batch, and the records on
the output topic. --watch redraws it every second until Ctrl-C."""


@dataclass(frozen=True)
class StatusSettings(Settings):
    """``ballast status``."""

    ENV_PREFIX: ClassVar[str] = "BALLAST_STATUS_"

    within_s: float = setting(60.0, "read the metrics published in the last this many seconds", minimum=1)
    watch: bool = setting(False, "redraw every second until Ctrl-C")


def cmd_status(args: argparse.Namespace) -> int:
    from ballast.kafka.admin import make_admin, partition_count
    from ballast.status.view import render
    from ballast.status.watch import StatusWatch

    settings = StatusSettings.from_args(args)
    prefix = LayoutSettings.from_args(args).prefix
    kafka = ConnectionSettings.from_args(args).checked_kafka_config("ballast-status")
    planned = TopicLayout(prefix=prefix)
    workers = partition_count(make_admin(kafka), planned.name("routed"))
    layout = TopicLayout(prefix=prefix, workers=workers)
    with StatusWatch(kafka, layout, settings.within_s) as watch:
        status = watch.poll(2.0)
        if args.json:
            print(json.dumps(status.as_dict()))
        elif settings.watch:
            from rich.live import Live

            with Live(render(status), refresh_per_second=2) as live:
                try:
                    while True:
                        time.sleep(1.0)
                        live.update(render(watch.poll(0.2)))
                except KeyboardInterrupt:
                    pass
        else:
            from rich.console import Console

            Console().print(render(status))
    if not status.measured_ms:
        print(f"no metrics on {layout.name('metrics')} in the last {settings.within_s:g} s: no service of "
              f"prefix {prefix!r} runs", file=sys.stderr)  # fmt: skip
        return 1
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``status`` to the ``ballast`` command."""
    status = add_command(sub, "status", "what a running deployment is doing (load, epoch, lag, results)",
                         DESCRIPTION)  # fmt: skip
    ConnectionSettings.add_arguments(status.add_argument_group("Kafka connection"))
    LayoutSettings.add_arguments(status.add_argument_group("topic layout"), only=("prefix",))
    StatusSettings.add_arguments(status.add_argument_group("status"))
    status.add_argument("--json", action="store_true", help="print the status as one JSON object")
    status.set_defaults(func=cmd_status)
