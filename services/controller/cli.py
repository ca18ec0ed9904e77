"""``ballast controller run`` (the service) and ``ballast controller plan`` (one planning round).

``run``: the one writer of the control log and the rebalancing loop (:mod:`services.controller.run`,
:mod:`services.controller.service`).

``plan``: one planning round, from the routers' statistics to the control log.

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
import logging
import sys
from dataclasses import dataclass
from typing import Any, ClassVar

from ballast.cli.connection import ConnectionSettings
from ballast.cli.console import UsageError, add_command
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
    direct: bool = setting(
        False,
        "append the update to the log yourself instead of asking the controller: only for a deployment "
        "with no controller running (it would fence the controller)",
    )


def cmd_plan(args: argparse.Namespace) -> int:
    from ballast.control.state import routing_update
    from ballast.control.writer import ControlLogWriter
    from services.controller.planning import planning_round
    from services.controller.router_load import read_router_load

    settings = PlanSettings.from_args(args)
    layout = LayoutSettings.from_args(args).layout()
    kafka = ConnectionSettings.from_args(args).checked_kafka_config("ballast-controller-plan")
    writer = (
        ControlLogWriter(kafka, layout.name("control"), issuer=settings.issuer) if settings.direct else None
    )
    try:
        state = writer.current_state(settings.timeout) if writer else _folded(kafka, layout, settings.timeout)
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
            update = routing_update(result.assign, list(result.unassign), reason=settings.reason)
            epoch = _append(writer, kafka, layout, settings, update, state.epoch)
    finally:
        if writer is not None:
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


def _folded(kafka, layout, timeout: float):
    from ballast.control.log import ControlLogReader
    from ballast.control.state import initial_state
    from ballast.kafka.admin import make_admin, partition_count

    reader = ControlLogReader(kafka, layout.name("control"), initial_state(partition_count(
        make_admin(kafka), layout.name("routed"))))  # fmt: skip
    try:
        reader.read_to_end(timeout)
        return reader.state
    finally:
        reader.close()


def _append(writer, kafka, layout, settings: PlanSettings, update: tuple[str, dict], at: int) -> int:
    """The update into the log: directly, or as a request planned at epoch ``at`` (refused if the
    log moved meanwhile: the plan was made against that table)."""
    from ballast.control.requests import ControlClient, NoControllerError

    if writer is not None:
        return int(writer.send(*update)["epoch"])
    _kind, body = update
    client = ControlClient(kafka, layout, settings.issuer)
    try:
        request = {k: body[k] for k in ("assign", "unassign", "reason")}
        answer = client.request("ROUTING_UPDATE", request, timeout=settings.timeout, expected_epoch=at)
    except NoControllerError as exc:
        from ballast.control.cli import ControlUnanswered

        raise ControlUnanswered(f"{exc} (or plan with --direct on a deployment without one)") from None
    finally:
        client.close()
    if not answer.accepted:
        raise UsageError(f"the controller refused the plan ({answer.reason}): {answer.detail}")
    return answer.epoch


def cmd_run(args: argparse.Namespace) -> int:
    from services.controller.config import ControllerSettings
    from services.controller.run import install_stop, run

    settings = ControllerSettings.from_args(args)
    logging.basicConfig(
        level=getattr(logging, settings.log_level.upper()),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    layout = LayoutSettings.from_args(args).layout()
    kafka = ConnectionSettings.from_args(args).checked_kafka_config("ballast-controller")
    return run(kafka, layout, settings, install_stop())


RUN_DESCRIPTION = (
    "The controller: the one writer of the control log after its genesis. It answers the requests "
    "in <prefix>.control-requests (ballast control send, the shedder, your tools) and runs the "
    "rebalancing loop: per interval it folds the routers' key statistics and the workers' statistics "
    "into load, forecasts the next interval, and when max/mean stays above 1 + theta it plans and "
    "moves keys in paced steps. A second instance fences the first (which exits, or stands by with "
    "--standby)."
)
PLAN_DESCRIPTION = (
    "One planning round from the routers' statistics on the metrics topic (intervals that ended at or "
    "after --since-ms; with --records, waiting until they cover that many routed records), with the "
    "Mixed planner against the table in force; the diff goes to the controller as a ROUTING_UPDATE "
    "request (planned at the log's epoch: refused if the log moved meanwhile), or with --direct "
    "straight into the log. Nothing when nothing changes; --dry-run sends nothing."
)


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``controller`` to the ``ballast`` command."""
    controller = sub.add_parser("controller", help="the controller service", description="The controller.")
    actions = controller.add_subparsers(dest="action", required=True, metavar="ACTION")
    plan = add_command(
        actions,
        "plan",
        "one planning round: router statistics -> Mixed plan -> the diff as a ROUTING_UPDATE",
        PLAN_DESCRIPTION,
    )
    ConnectionSettings.add_arguments(plan.add_argument_group("Kafka connection"))
    LayoutSettings.add_arguments(plan.add_argument_group("topic layout"), only=("prefix",))
    PlanSettings.add_arguments(plan.add_argument_group("planning round"))
    plan.add_argument("--json", action="store_true", help="print the round as one JSON object")
    plan.set_defaults(func=cmd_plan)
    from services.controller.config import ControllerSettings

    run = add_command(actions, "run", "the controller service, until SIGTERM", RUN_DESCRIPTION)
    ConnectionSettings.add_arguments(run.add_argument_group("Kafka connection"))
    LayoutSettings.add_arguments(run.add_argument_group("topic layout"), only=("prefix",))
    ControllerSettings.add_arguments(run.add_argument_group("controller"))
    run.set_defaults(func=cmd_run)
