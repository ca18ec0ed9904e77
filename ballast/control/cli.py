"""``ballast control send|show``: write control events by hand, exactly as the controller will.

Why a CLI before the controller exists: tests, demos and operators need to move keys, scale and
shed; going through :class:`~ballast.control.log.ControlLogWriter` means the same dense-epoch,
fenced, validated path the controller (a later issue) will use.

Settings come from :mod:`ballast.settings` only: the connection (``--bootstrap``, ``--state-dir``),
the topic layout (topic names) and the issuer. Epoch 0 comes from the control log's genesis
(written by ``ballast topics create``), not from flags. The writer's transactional id is derived
from the control topic by :mod:`ballast.control.log`, so every writer of one control log fences
every other.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from typing import ClassVar

from ballast.cli.connection import ConnectionSettings
from ballast.cli.console import UsageError, add_command
from ballast.kafka.topics import LayoutSettings
from ballast.settings import Settings, setting


@dataclass(frozen=True)
class ControlSettings(Settings):
    """Who writes control events by hand."""

    ENV_PREFIX: ClassVar[str] = "BALLAST_CONTROL_"

    issuer: str = setting("ballast-control-cli", "issuer name stored in each event")


@dataclass(frozen=True)
class EventRequest:
    """What ``control send`` was asked to write, parsed before any broker is contacted."""

    kind: str  # "update" | "snapshot" | "scale" | "shed"
    assign: dict[str, int]
    unassign: tuple[str, ...]
    scale: int | None
    shed: tuple[str, float] | None
    reason: str


def _pair(flag: str, item: str, cast: type, what: str) -> tuple[str, object]:
    key, sep, value = item.rpartition("=")
    if not sep or not key:
        raise UsageError(f"{flag}: expected {what}, got {item!r}")
    try:
        return key, cast(value)
    except ValueError:
        raise UsageError(f"{flag}: expected {what}, got {item!r}") from None


def parse_request(args: argparse.Namespace) -> EventRequest:
    """The event the flags ask for; exactly one kind per command (a :class:`UsageError` otherwise)."""
    kinds = [bool(args.assign or args.unassign), args.snapshot, args.scale is not None, bool(args.shed)]
    if sum(kinds) != 1:
        raise UsageError("give exactly one of --assign/--unassign, --snapshot, --scale, --shed")
    assign = dict(_pair("--assign", a, int, "KEY=WORKER with an integer WORKER") for a in args.assign)
    shed = None
    if args.shed:
        target, p = _pair("--shed", args.shed, float, "TARGET=P with a probability P")
        shed = (target, float(p))  # type: ignore[arg-type]
    if args.scale is not None and args.scale < 1:
        raise UsageError(f"--scale: expected a number of workers >= 1, got {args.scale}")
    kind = "update" if kinds[0] else "snapshot" if args.snapshot else "scale" if kinds[2] else "shed"
    return EventRequest(kind, assign, tuple(args.unassign), args.scale, shed, args.reason)  # type: ignore[arg-type]


def build_event(request: EventRequest, state) -> tuple[str, dict]:  # state: ControlState
    """(type, body) of the requested event against the current folded ``state``."""
    from ballast.control import state as cs

    if request.kind == "update":
        return cs.routing_update(request.assign, request.unassign, request.reason)
    if request.kind == "snapshot":
        return cs.table_snapshot(state)
    if request.kind == "scale":
        assert request.scale is not None
        return cs.scale(request.scale, request.reason)
    assert request.shed is not None
    return cs.shedding(request.shed[0], request.shed[1], request.reason)


def _open(args: argparse.Namespace):  # -> (KafkaConfig, control topic, ControlState before the genesis)
    """Check the broker, then the topics; the log's genesis must record the routed topic's partitions."""
    from ballast.control.state import initial_state
    from ballast.kafka.admin import make_admin, partition_count

    kafka = ConnectionSettings.from_args(args).checked_kafka_config("ballast-control")
    layout = LayoutSettings.from_args(args).layout()
    admin = make_admin(kafka)
    routed = partition_count(admin, layout.name("routed"), timeout=5)
    control = layout.name("control")
    partition_count(admin, control, timeout=5)  # exists, or a one-line TopicMissingError
    return kafka, control, initial_state(routed)


def _event_json(e: dict, with_issuer: bool = False) -> str:
    out = {"epoch": e["epoch"], "type": e["type"]}
    if with_issuer:
        out["issuer"] = e["issuer"]
    return json.dumps({**out, "payload": e["payload"][1]}, default=repr)


def cmd_send(args: argparse.Namespace) -> int:
    from ballast.control.log import ControlLogWriter

    request = parse_request(args)  # user errors first, before any broker is contacted
    issuer = ControlSettings.from_args(args).issuer
    kafka, topic, initial = _open(args)
    writer = ControlLogWriter(kafka, topic, initial, issuer=issuer)
    try:
        event = writer.send(*build_event(request, writer.current_state()))
    finally:
        writer.close()
    print(_event_json(event))
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from ballast.control.log import ControlLogReader

    kafka, topic, initial = _open(args)
    reader = ControlLogReader(kafka, topic, initial, start_offset=0)  # from the genesis: every event
    try:
        events = reader.read_to_end()
    finally:
        reader.close()
    for e in events:
        print(_event_json(e, with_issuer=True))
    s = reader.state
    folded = {
        "epoch": s.epoch,
        "num_workers": s.num_workers,
        "table_size": len(s.table),
        "keep_probability": dict(s.keep_probability),
    }
    print(json.dumps(folded))
    return 0


def _common(p: argparse.ArgumentParser) -> None:
    ConnectionSettings.add_arguments(p)
    LayoutSettings.add_arguments(p, only=("prefix",))


def register(subparsers: argparse._SubParsersAction) -> None:
    control = add_command(subparsers, "control", "the control log").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    send = add_command(
        control,
        "send",
        "append one control event with epoch = last + 1",
        "Append one control event (epoch = last + 1) to <prefix>.control, validated against "
        "the folded log: a worker id outside the routed partitions is refused.",
    )
    _common(send)
    ControlSettings.add_arguments(send)
    event = send.add_argument_group("the event (exactly one kind)")
    event.add_argument(
        "--assign",
        action="append",
        default=[],
        metavar="KEY=WORKER",
        help="ROUTING_UPDATE entry (repeatable)",
    )
    event.add_argument(
        "--unassign", action="append", default=[], metavar="KEY", help="return KEY to the hash (repeatable)"
    )
    event.add_argument("--snapshot", action="store_true", help="TABLE_SNAPSHOT of the current folded state")
    event.add_argument("--scale", type=int, default=None, metavar="N", help="SCALE to N active workers")
    event.add_argument(
        "--shed", default=None, metavar="TARGET=P", help="SHEDDING: keep-probability P for TARGET"
    )
    event.add_argument("--reason", default="", help="free text stored in the event")
    send.set_defaults(func=cmd_send)
    show = add_command(
        control,
        "show",
        "print the events and the folded state",
        "Print every committed event of <prefix>.control from its genesis (one JSON object per "
        "line), then the folded state.",
    )
    _common(show)
    show.set_defaults(func=cmd_show)
