"""``ballast controller plan``: one planning round, from the routers' statistics to the control log.

Why a command before the controller service exists: the demo and the benchmarks need "plan now,
from what the routers published" without importing the controller (services and their users talk
through Kafka and the command line). The round reads the router statistics from the metrics topic
(those of intervals that ended at or after ``--since-ms``; with ``--records``, waiting until they
cover that many routed records), plans with the Mixed planner against the table in force, and
appends the diff as one ``ROUTING_UPDATE`` (nothing when nothing changes; ``--dry-run`` appends
nothing). It prints what it did as JSON on stdout (``--json``) or as one line.

The controller service (next) runs the same round in a loop, with a forecast and paced migration.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from typing import Any, ClassVar

from ballast.cli.connection import ConnectionSettings
from ballast.cli.console import add_command
from ballast.kafka.topics import LayoutSettings
from ballast.settings import Settings, setting


@dataclass(frozen=True)
class PlanSettings(Settings):
    """One planning round."""

    ENV_PREFIX: ClassVar[str] = "BALLAST_CONTROLLER_"

    theta: float = setting(0.08, "imbalance tolerance: the plan aims at max/mean <= 1 + theta", minimum=0)
    records: int = setting(0, "wait until the statistics read cover this many routed records", minimum=0)
    since_ms: int = setting(0, "use only statistics intervals that ended at or after this time (epoch ms)")
    timeout: float = setting(60.0, "seconds to wait for the statistics and the control log", minimum=1)
    issuer: str = setting("ballast-controller-plan", "issuer stored in the event")
    reason: str = setting("Mixed plan from router heavy hitters", "reason stored in the event")
    dry_run: bool = setting(False, "plan and print, append nothing")


def cmd_plan(args: argparse.Namespace) -> int:
    from ballast.control.log import ControlLogWriter
    from ballast.control.state import routing_update
    from services.controller.planning import planning_round
    from services.controller.router_load import read_router_load

    settings = PlanSettings.from_args(args)
    layout = LayoutSettings.from_args(args).layout()
    kafka = ConnectionSettings.from_args(args).checked_kafka_config("ballast-controller-plan")
    writer = ControlLogWriter(kafka, layout.name("control"), issuer=settings.issuer)
    try:
        state = writer.current_state(settings.timeout)
        load = read_router_load(
            kafka,
            layout.name("metrics"),
            state.num_workers,
            records=settings.records,
            since_ms=settings.since_ms,
            timeout=settings.timeout,
        )
        result = planning_round(load, state, settings.theta)
        epoch = state.epoch
        sent = result.changes and not settings.dry_run
        if sent:
            event = writer.send(*routing_update(result.assign, list(result.unassign), reason=settings.reason))
            epoch = int(event["epoch"])
    finally:
        writer.close()
    report: dict[str, Any] = {
        "epoch": epoch,
        "sent": sent,
        "workers": state.num_workers,
        "heavy_hitters": len(load.heavy_hitters),
        "intervals": load.intervals,
        "covered_records": load.kept_records,
        "table_size": len(result.table),
        "assign": result.assign,
        "unassign": list(result.unassign),
        "moves": {k: list(v) for k, v in result.moves(state.num_workers).items()},
        "plan_ms": round(result.plan_ms, 3),
        "predicted_max_mean": round(result.predicted_max_mean, 4),
        "feasible": bool(result.plan.feasible),
    }
    if args.json:
        print(json.dumps(report))
    else:
        what = f"epoch {epoch}" if sent else "no change" if not result.changes else "dry run, nothing sent"
        print(
            f"plan: {len(result.assign)} assigned, {len(result.unassign)} back to the hash, table "
            f"{len(result.table)} keys, predicted max/mean {result.predicted_max_mean:.3f} from "
            f"{len(load.heavy_hitters):,} heavy hitters ({what})"
        )
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``controller`` to the ``ballast`` command."""
    controller = sub.add_parser("controller", help="the controller service", description="The controller.")
    actions = controller.add_subparsers(dest="action", required=True, metavar="ACTION")
    plan = add_command(
        actions,
        "plan",
        "one planning round: router statistics -> Mixed plan -> the diff as a ROUTING_UPDATE",
        (__doc__ or "").split("\n\n")[1].replace("\n", " "),
    )
    ConnectionSettings.add_arguments(plan.add_argument_group("Kafka connection"))
    LayoutSettings.add_arguments(plan.add_argument_group("topic layout"), only=("prefix",))
    PlanSettings.add_arguments(plan.add_argument_group("planning round"))
    plan.add_argument("--json", action="store_true", help="print the round as one JSON object")
    plan.set_defaults(func=cmd_plan)
