"""``ballast control send|show``: write control events by hand, exactly as the controller will.

Why a CLI before the controller exists: tests, demos and operators need to move keys, scale and
shed; going through :class:`~ballast.control.log.ControlLogWriter` means the same dense-epoch,
fenced, validated path the controller (a later issue) will use.
"""

from __future__ import annotations

import argparse
import json
import os

from ballast.kafka.config import KafkaConfig


def _topic(args: argparse.Namespace) -> str:
    return args.control_topic or f"{args.prefix}.control"


def _initial(args: argparse.Namespace, kafka: KafkaConfig):  # -> ControlState
    from ballast.control.log import ControlState
    from ballast.kafka.clients import make_admin

    routed = args.routed_topic or f"{args.prefix}.routed"
    meta = make_admin(kafka).list_topics(routed, timeout=10).topics.get(routed)
    partitions = len(meta.partitions) if meta is not None and meta.error is None and meta.partitions else None
    workers = args.workers or partitions or 8
    return ControlState(num_workers=workers, max_workers=partitions)


def _pairs(items: list[str], cast: type) -> dict[str, object]:
    out: dict[str, object] = {}
    for item in items:
        key, sep, value = item.rpartition("=")
        if not sep or not key:
            raise SystemExit(f"expected KEY=VALUE, got {item!r}")
        out[key] = cast(value)
    return out


def build_event(args: argparse.Namespace, state) -> tuple[str, dict]:  # state: ControlState
    """(type, body) from the flags; exactly one kind per command."""
    from ballast.control import log as cl

    kinds = [bool(args.assign or args.unassign), args.snapshot, args.scale is not None, bool(args.shed)]
    if sum(kinds) != 1:
        raise SystemExit("give exactly one of --assign/--unassign, --snapshot, --scale, --shed")
    if args.assign or args.unassign:
        return cl.routing_update(_pairs(args.assign, int), args.unassign, args.reason)  # type: ignore[arg-type]
    if args.snapshot:
        return cl.table_snapshot(state)
    if args.scale is not None:
        return cl.scale(args.scale, args.reason)
    ((target, p),) = _pairs([args.shed], float).items()
    return cl.shedding(target, float(p), args.reason)  # type: ignore[arg-type]


def cmd_send(args: argparse.Namespace) -> int:
    from ballast.cli import resolve_bootstrap
    from ballast.control.log import ControlLogWriter

    kafka = KafkaConfig(bootstrap_servers=resolve_bootstrap(args), client_id="ballast-control")
    writer = ControlLogWriter(
        kafka, _topic(args), _initial(args, kafka), transactional_id=args.transactional_id, issuer=args.issuer
    )
    try:
        etype, body = build_event(args, writer.current_state())
        event = writer.send(etype, body)
    finally:
        writer.close()
    print(json.dumps({"epoch": event["epoch"], "type": event["type"], "payload": event["payload"][1]}))
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from ballast.cli import resolve_bootstrap
    from ballast.control.log import ControlLogReader

    kafka = KafkaConfig(bootstrap_servers=resolve_bootstrap(args), client_id="ballast-control")
    reader = ControlLogReader(kafka, _topic(args), _initial(args, kafka))
    try:
        events = reader.read_to_end()
    finally:
        reader.close()
    for e in events:
        print(
            json.dumps(
                {"epoch": e["epoch"], "type": e["type"], "issuer": e["issuer"], "payload": e["payload"][1]},
                default=repr,
            )
        )
    s = reader.state
    print(
        json.dumps(
            {
                "epoch": s.epoch,
                "num_workers": s.num_workers,
                "table_size": len(s.table),
                "keep_probability": dict(s.keep_probability),
            }
        )
    )
    return 0


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--bootstrap", help="bootstrap servers (env BALLAST_BOOTSTRAP_SERVERS)")
    p.add_argument("--prefix", default=os.environ.get("BALLAST_TOPIC_PREFIX", "ballast"))
    p.add_argument(
        "--control-topic", default=os.environ.get("BALLAST_CONTROL_TOPIC"), help="default <prefix>.control"
    )
    p.add_argument(
        "--routed-topic",
        default=os.environ.get("BALLAST_ROUTED_TOPIC"),
        help="default <prefix>.routed (its partition count bounds worker ids)",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=int(os.environ.get("BALLAST_WORKERS", "0")),
        help="active workers at epoch 0 (default: routed topic partitions)",
    )


def register(subparsers: argparse._SubParsersAction) -> None:
    control = subparsers.add_parser("control", help="the control log").add_subparsers(
        dest="action", required=True
    )
    send = control.add_parser("send", help="append one control event with epoch = last + 1")
    _common(send)
    send.add_argument(
        "--assign", action="append", default=[], metavar="KEY=WORKER", help="ROUTING_UPDATE entry"
    )
    send.add_argument("--unassign", action="append", default=[], metavar="KEY", help="return KEY to the hash")
    send.add_argument("--snapshot", action="store_true", help="TABLE_SNAPSHOT of the current folded state")
    send.add_argument("--scale", type=int, default=None, metavar="N", help="SCALE to N active workers")
    send.add_argument(
        "--shed", default=None, metavar="TARGET=P", help="SHEDDING: keep-probability P for TARGET"
    )
    send.add_argument("--reason", default="", help="free text stored in the event")
    send.add_argument("--issuer", default=os.environ.get("BALLAST_CONTROL_ISSUER", "ballast-control-cli"))
    send.add_argument(
        "--transactional-id",
        default=os.environ.get("BALLAST_CONTROL_TXN_ID", "ballast-control-writer"),
        help="fixed id: a second writer with the same id fences the first",
    )
    send.set_defaults(func=cmd_send)
    show = control.add_parser("show", help="print the events and the folded state")
    _common(show)
    show.set_defaults(func=cmd_show)
