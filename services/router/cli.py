"""``ballast router run``: one router instance, configured from three settings groups.

Every setting is a flag and an environment variable, listed with its default by ``--help``: the
connection (``--bootstrap``, ``--state-dir``), the topic layout (``--prefix``, ``--workers``,
``--active-workers``, ...) and the router's own (``BALLAST_ROUTER_*``).

Why the broker check comes first: without it a router pointed at nothing retries for tens of
seconds and logs hundreds of librdkafka lines; with it, it exits within seconds with one line.
Errors the user can act on (``BrokerUnreachable``, ``SettingsError``, ``TopicMissingError``, and
``GenesisMissingError`` / ``GenesisConflictError`` when the control log has no genesis or the flags
contradict it) propagate to ``ballast``'s main, which prints them as that one line.

Why SIGTERM only sets a flag: the loop checks it between batches, finishes (commits) the open
transaction and closes the consumer, so a stop never leaves a half-written interval behind.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import time

from ballast.cli.connection import ConnectionSettings
from ballast.kafka.topics import LayoutSettings
from ballast.readiness import announce_ready
from services.router.config import RouterSettings


def cmd_run(args: argparse.Namespace) -> int:
    from services.router.router import Router

    connection = ConnectionSettings.from_args(args)
    layout = LayoutSettings.from_args(args)
    settings = RouterSettings.from_args(args).resolved(layout.prefix)
    logging.basicConfig(
        level=getattr(logging, settings.log_level.upper()),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    kafka = connection.checked_kafka_config(client_id=f"ballast-router-{settings.router_id}")
    started = time.perf_counter()
    router = Router.connect(settings, layout.layout(), kafka, active_workers=layout.active_workers)

    def on_signal(signum: int, _frame: object) -> None:
        logging.getLogger("services.router").info("signal %d: finishing the open transaction", signum)
        router.stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    router.start()
    # Router.connect() to ready (clients, genesis check, control-log fold, subscription), without
    # the interpreter's start and imports: announced, so a benchmark can read it from outside
    startup_s = round(time.perf_counter() - started, 4)
    print(
        f"router {settings.router_id}: bootstrap {kafka.connection.describe()}, {router.describe()}",
        file=sys.stderr,
        flush=True,
    )
    announce_ready("router", router_id=settings.router_id, epoch=router.state.epoch, startup_s=startup_s)
    totals = router.run()
    print(json.dumps({"router_id": settings.router_id, **totals.__dict__}), flush=True)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    router = subparsers.add_parser("router", help="the router service", description="The router service.")
    actions = router.add_subparsers(dest="action", required=True, metavar="ACTION")
    run = actions.add_parser(
        "run",
        help="route the input topic(s) to the routed topic until SIGTERM",
        description="Route the input topic(s) to the routed topic until SIGTERM (exactly-once by default).",
    )
    ConnectionSettings.add_arguments(run.add_argument_group("Kafka connection"))
    LayoutSettings.add_arguments(run.add_argument_group("topic layout (topic names come from --prefix)"))
    RouterSettings.add_arguments(run.add_argument_group("router"))
    run.set_defaults(func=cmd_run)
