"""``ballast router run``: one router instance; every knob is a flag and a ``BALLAST_ROUTER_*`` variable.

Why SIGTERM only sets a flag: the loop checks it between batches, finishes (commits) the open
transaction and closes the consumer, so a stop never leaves a half-written interval behind.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys

from ballast.kafka.config import KafkaConfig
from services.router.config import RouterConfig


def cmd_run(args: argparse.Namespace) -> int:
    from ballast.cli import resolve_bootstrap
    from services.router.router import Router

    logging.basicConfig(
        level=getattr(logging, args.log_level.upper()),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    cfg = RouterConfig.from_args(args)
    kafka = KafkaConfig(
        bootstrap_servers=resolve_bootstrap(args), client_id=f"ballast-router-{cfg.router_id}"
    )
    router = Router(cfg, kafka)

    def on_signal(signum: int, _frame: object) -> None:
        logging.getLogger("services.router").info("signal %d: finishing the open transaction", signum)
        router.stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    totals = router.run()
    print(json.dumps({"router_id": cfg.router_id, **totals.__dict__}), flush=True)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    router = subparsers.add_parser("router", help="the router service").add_subparsers(
        dest="action", required=True
    )
    run = router.add_parser("run", help="route the input topic(s) to the routed topic until SIGTERM")
    run.add_argument("--bootstrap", help="bootstrap servers (env BALLAST_BOOTSTRAP_SERVERS)")
    run.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    RouterConfig.add_arguments(run)
    run.set_defaults(func=cmd_run)
