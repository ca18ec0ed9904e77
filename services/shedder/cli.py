"""``ballast shedder run`` (the service) and ``ballast lag`` (the lag of every group, now).

``shedder run``: measures the time lag of the routers' group and of every reduce job, publishes it
(``LagSample`` on the metrics topic, Prometheus), and when a declared stream's lag outruns its
target asks the controller to shed (:mod:`services.shedder.run`, docs/shedder.md).

``lag``: the newest ``LagSample`` of every group the shedder measured (:mod:`services.shedder.lag_report`),
as a table or ``--json``.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from dataclasses import dataclass
from typing import ClassVar

from ballast.cli.connection import ConnectionSettings
from ballast.cli.console import UsageError, add_command
from ballast.kafka.topics import LayoutSettings
from ballast.settings import Settings, setting

RUN_DESCRIPTION = (
    "The shedder: samples the log-end offsets of the declared input streams and the routed topic "
    "and the routers' committed offsets, follows the reduce jobs' progress on the metrics topic, and "
    "turns offsets into time lag. Every --cycle-s it decides keep-probabilities (lower priority "
    "first, never below a stream's minimum accuracy) and asks the controller for each change as a "
    "SHEDDING request with an id the controller deduplicates. Publishes LagSamples and, with "
    "--metrics-port, a Prometheus endpoint. Runs until SIGTERM."
)
LAG_DESCRIPTION = (
    "The newest time lag and status of every group (the router group; each reduce job) and stage, "
    "as the shedder published them on the metrics topic in the last --within-s seconds. Exit 1 "
    "when there are none (no shedder runs)."
)


def cmd_run(args: argparse.Namespace) -> int:
    from services.shedder.config import PolicySettings, ShedderSettings
    from services.shedder.run import run

    settings = ShedderSettings.from_args(args)
    policy = PolicySettings.from_args(args)
    streams = policy.streams()
    if not streams:
        raise UsageError("no stream declared: give --stream topic=T,target=30s,... or --streams-file")
    logging.basicConfig(
        level=getattr(logging, settings.log_level.upper()),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    layout = LayoutSettings.from_args(args).layout()
    settings = settings.resolved(layout.prefix)  # its id and the routers' group, from the prefix
    kafka = ConnectionSettings.from_args(args).checked_kafka_config(settings.shedder_id)
    kafka.connection.faust()  # a client setting faust cannot take: one line before anything starts
    return run(kafka, layout, settings, policy, streams)


@dataclass(frozen=True)
class LagSettings(Settings):
    """``ballast lag``."""

    ENV_PREFIX: ClassVar[str] = "BALLAST_LAG_"

    within_s: float = setting(60.0, "read the samples published in the last this many seconds", minimum=1)
    timeout: float = setting(30.0, "seconds to wait for the metrics topic", minimum=1)


def cmd_lag(args: argparse.Namespace) -> int:
    from services.shedder.lag_report import format_table, group_reports, read_lag_metrics

    settings = LagSettings.from_args(args)
    layout = LayoutSettings.from_args(args).layout()
    kafka = ConnectionSettings.from_args(args).checked_kafka_config("ballast-lag")
    reports = group_reports(
        read_lag_metrics(kafka, layout.name("metrics"), settings.within_s, settings.timeout)
    )
    if args.json:
        print(json.dumps([r.as_dict(args.partitions) for r in reports]))
    elif reports:
        print(format_table(reports, int(time.time() * 1000), args.partitions))
    if not reports:
        print(
            f"no lag samples on {layout.name('metrics')} in the last {settings.within_s:g} s: no shedder "
            "runs (start one with `ballast shedder run --stream ...`)",
            file=sys.stderr,
        )
        return 1
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``shedder`` to the ``ballast`` command."""
    from services.shedder.config import PolicySettings, ShedderSettings

    shedder = sub.add_parser("shedder", help="the shedder service", description="The shedder.")
    actions = shedder.add_subparsers(dest="action", required=True, metavar="ACTION")
    run = add_command(actions, "run", "the shedder service, until SIGTERM", RUN_DESCRIPTION)
    ConnectionSettings.add_arguments(run.add_argument_group("Kafka connection"))
    LayoutSettings.add_arguments(run.add_argument_group("topic layout"), only=("prefix",))
    PolicySettings.add_arguments(run.add_argument_group("shedding policy"))
    ShedderSettings.add_arguments(run.add_argument_group("shedder"))
    run.set_defaults(func=cmd_run)


def register_lag(sub: argparse._SubParsersAction) -> None:
    """Add ``lag`` to the ``ballast`` command."""
    lag = add_command(
        sub, "lag", "time lag and status per group and stage, as the shedder measured", LAG_DESCRIPTION
    )
    ConnectionSettings.add_arguments(lag.add_argument_group("Kafka connection"))
    LayoutSettings.add_arguments(lag.add_argument_group("topic layout"), only=("prefix",))
    LagSettings.add_arguments(lag.add_argument_group("lag"))
    lag.add_argument("--json", action="store_true", help="print one JSON list, one object per group")
    lag.add_argument("--partitions", action="store_true", help="also every partition of every group")
    lag.set_defaults(func=cmd_lag)
