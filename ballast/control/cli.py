"""``ballast control send|log|show|table|rebalance|keygen``: ask the controller for changes, read the
log, make the key that signs it.

Why ``send`` asks instead of writing: the control log has one writer, the controller
(``ballast controller run``), so every change is checked against the state it lands on and gets
one place in one order. ``send`` sends a ``ControlRequest`` (:mod:`ballast.control.requests`) and
waits for the answer: the accepted epoch (exit 0), the refusal with its reason (exit 2), or, when no
controller answers within ``--timeout``, one line saying so and how to start one (exit 1).

Settings come from :mod:`ballast.settings` only: the connection (``--bootstrap``, ``--state-dir``),
the topic layout (topic names) and the issuer. Epoch 0 comes from the control log's genesis
(written by ``ballast topics create``), not from flags.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from ballast.cli.connection import ConnectionSettings
from ballast.cli.console import EnvironmentProblem, UsageError, add_command
from ballast.kafka.topics import LayoutSettings
from ballast.settings import Settings, setting

if TYPE_CHECKING:
    from ballast.control.requests import Response


@dataclass(frozen=True)
class ControlSettings(Settings):
    """Who writes control events by hand."""

    ENV_PREFIX: ClassVar[str] = "BALLAST_CONTROL_"

    issuer: str = setting("ballast-control-cli", "who asks (stored with the request)")
    timeout: float = setting(10.0, "seconds to wait for the controller's answer", minimum=0.1)


@dataclass(frozen=True)
class EventRequest:
    """What ``control send`` was asked to write, parsed before any broker is contacted."""

    kind: str  # "update" | "scale" | "shed"
    assign: dict[str, int]
    unassign: tuple[str, ...]
    scale: int | None
    shed: tuple[str, float] | None
    reason: str
    shed_seed: int | None = None  # None: the controller keeps the seed in force for the target


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
    kinds = [bool(args.assign or args.unassign), args.scale is not None, bool(args.shed)]
    if sum(kinds) != 1:
        raise UsageError("give exactly one of --assign/--unassign, --scale, --shed")
    assign = dict(_pair("--assign", a, int, "KEY=WORKER with an integer WORKER") for a in args.assign)
    shed = None
    if args.shed:
        target, p = _pair("--shed", args.shed, float, "TARGET=P with a probability P")
        shed = (target, float(p))  # type: ignore[arg-type]
    seed = getattr(args, "shed_seed", None)
    if seed is not None and not args.shed:
        raise UsageError("--shed-seed: only with --shed")
    if args.scale is not None and args.scale < 1:
        raise UsageError(f"--scale: expected a number of workers >= 1, got {args.scale}")
    kind = "update" if kinds[0] else "scale" if kinds[1] else "shed"
    return EventRequest(kind, assign, tuple(args.unassign), args.scale, shed, args.reason, seed)  # type: ignore[arg-type]


def request_body(request: EventRequest) -> tuple[str, dict]:
    """(kind, payload) of the ``ControlRequest`` that asks for the event."""
    if request.kind == "update":
        return "ROUTING_UPDATE", {
            "assign": dict(request.assign),
            "unassign": list(request.unassign),
            "reason": request.reason,
        }
    if request.kind == "scale":
        assert request.scale is not None
        return "SCALE", {"num_workers": request.scale, "reason": request.reason}
    assert request.shed is not None
    return "SHEDDING", {
        "target": request.shed[0],
        "keep_probability": request.shed[1],
        "reason": request.reason,
        "seed": request.shed_seed,
    }


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


def _client(args: argparse.Namespace):
    from ballast.control.requests import ControlClient

    kafka = ConnectionSettings.from_args(args).checked_kafka_config("ballast-control")
    layout = LayoutSettings.from_args(args).layout()
    return ControlClient(kafka, layout, ControlSettings.from_args(args).issuer)


def cmd_send(args: argparse.Namespace) -> int:

    request = parse_request(args)  # user errors first, before any broker is contacted
    settings = ControlSettings.from_args(args)
    kind, body = request_body(request)
    answer = _ask(
        args, kind, body, timeout=settings.timeout, expected_epoch=args.expect_epoch,
        request_id=args.request_id or None,
    )  # fmt: skip
    print(
        json.dumps(
            {
                "epoch": answer.epoch,
                "kind": kind,
                "duplicate": answer.duplicate,
                "request_id": answer.request_id,
            }
        )
    )
    return 0


class ControlUnanswered(EnvironmentProblem):
    """No controller answered (exit 1: the environment, not the request)."""


def _ask(args: argparse.Namespace, kind: str, body: dict[str, Any], **request: Any) -> Response:
    """One request, answered: a refusal is the user's (exit 2), no answer the environment's (exit 1)."""
    from ballast.control.requests import NoControllerError

    client = _client(args)
    try:
        answer = client.request(kind, body, **request)
    except NoControllerError as exc:
        raise ControlUnanswered(str(exc)) from None
    finally:
        client.close()
    if not answer.accepted:
        raise UsageError(f"refused ({answer.reason}): {answer.detail}")
    return answer


def cmd_rebalance(args: argparse.Namespace) -> int:
    """Ask the controller to plan now; ``--dry-run`` (the default) prints the plan, changes nothing."""

    settings = ControlSettings.from_args(args)
    answer = _ask(args, "REBALANCE", {"dry_run": not args.apply}, timeout=settings.timeout)
    print(answer.detail)
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
        "shed_seed": dict(s.shed_seed),
    }
    print(json.dumps(folded))
    return 0


def summary(e: dict) -> str:
    """One line about an event, for people (``control log``)."""
    body = e["payload"][1]
    kind = e["type"]
    if kind == "ROUTING_UPDATE":
        text = f"assign {len(body.get('assign', {}))}, unassign {len(body.get('unassign', []))}"
        if body.get("migration_id"):
            text += f" [{body['migration_id']}]"
    elif kind == "SCALE":
        text = f"{body['num_workers']} hashed workers"
    elif kind == "SHEDDING":
        text = f"keep {body['keep_probability']:g} of {body['target']}"
        if body.get("seed"):
            text += f" (seed {body['seed']})"
    elif kind == "MIGRATION_STEP":
        text = f"{body['phase']} {body['migration_id']}: {len(body.get('keys', []))} keys"
    elif kind == "SCALING":
        dry = " (dry run)" if body["mode"] == "DRY_RUN" else ""
        text = f"{body['policy']}: {body['stage']} {body['from_instances']} -> {body['to_instances']}{dry}"
    else:
        text = f"{body['num_workers']} workers, table of {len(body.get('table', {}))}"
    reason = body.get("reason") or ""
    return f"{text}: {reason}" if reason else text


def _events(args: argparse.Namespace) -> tuple[list[dict], object]:
    from ballast.control.log import ControlLogReader

    kafka, topic, initial = _open(args)
    reader = ControlLogReader(kafka, topic, initial, start_offset=0)  # from the genesis: every event
    try:
        return reader.read_to_end(), reader.state
    finally:
        reader.close()


def cmd_log(args: argparse.Namespace) -> int:
    """Every event: epoch, time, kind, a summary (``--json``: one object per line)."""
    import datetime as dt

    events, _state = _events(args)
    for e in events[-args.last :] if args.last else events:
        when = dt.datetime.fromtimestamp(e["issued_at"] / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
        if args.json:
            print(json.dumps({"epoch": e["epoch"], "time": when, "kind": e["type"], "summary": summary(e),
                              "issuer": e["issuer"], "request_id": e.get("request_id", "")}))  # fmt: skip
        else:
            print(f"{e['epoch']:>7}  {when}  {e['type']:<15} {summary(e)}")
    return 0


def in_flight(events: list[dict]) -> dict | None:
    """The paced migration a log leaves open (its START, with no DONE or ABORT after it)."""
    open_: dict | None = None
    for e in events:
        if e["type"] == "MIGRATION_STEP":
            body = e["payload"][1]
            if body["phase"] == "START":
                open_ = {"migration_id": body["migration_id"], "epoch": e["epoch"], "keys": len(body["keys"])}
            elif (
                open_ and body["migration_id"] == open_["migration_id"] and body["phase"] in ("DONE", "ABORT")
            ):
                open_ = None
    return open_


def cmd_table(args: argparse.Namespace) -> int:
    """The routing table in force, the migration in flight, the controller's last decision."""
    events, state = _events(args)
    status = _latest_status(args)
    out = {
        "epoch": state.epoch,
        "num_workers": state.num_workers,
        "table": {k.decode(): w for k, w in sorted(state.table.items())},
        "keep_probability": dict(state.keep_probability),
        "shed_seed": dict(state.shed_seed),
        "migration": in_flight(events),
        "controller": status,
    }
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"epoch {state.epoch}, {state.num_workers} hashed workers, {len(state.table)} keys pinned")
    for key, worker in out["table"].items():
        print(f"  {key} -> {worker}")
    migration = out["migration"]
    print(f"migration in flight: {migration['migration_id']} ({migration['keys']} keys)" if migration
          else "no migration in flight")  # fmt: skip
    if status:
        print(f"controller {status['controller']}: last decision: {status['last_decision'] or '-'}; "
              f"realized max/mean {status['realized_imbalance']:.2f}")  # fmt: skip
    return 0


def _latest_status(args: argparse.Namespace) -> dict | None:
    """The newest ControllerStatus of the last minute on the metrics topic (None: no controller)."""

    from ballast.metrics.reader import MetricsReader
    from ballast.metrics.records import ControllerStatus

    kafka = ConnectionSettings.from_args(args).checked_kafka_config("ballast-control")
    topic = LayoutSettings.from_args(args).layout().name("metrics")
    reader = MetricsReader.since(kafka, topic, 60.0, timeout=10)
    try:
        latest = [b for b in (m.body for m in reader.read_to_end(15)) if isinstance(b, ControllerStatus)]
    finally:
        reader.follower.close()
    return latest[-1].__dict__ if latest else None


def cmd_keygen(args: argparse.Namespace) -> int:
    """Make a control log signing key (never replaces one); print its id and public key."""
    from ballast.control.signing import PUBLIC_KEY_ENV, SIGNING_KEY_ENV, SigningError, SigningKey

    try:
        key = SigningKey.create(args.file)
    except SigningError as exc:
        raise EnvironmentProblem(str(exc)) from None
    print(f"signing key {key.public.id} written to {args.file} (mode 0600)")
    print(f"its writers (topics create, controller run) read it from {SIGNING_KEY_ENV}={args.file}")
    print(f"readers may pin it: {PUBLIC_KEY_ENV}={key.public.text()}")
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
        "ask the controller for one change of the control log",
        "Ask the controller (`ballast controller run`) for one control event: it is checked against "
        "the folded log and appended with epoch = last + 1, or refused with a reason (exit 2). "
        "No controller answering within --timeout: exit 1.",
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
    event.add_argument("--scale", type=int, default=None, metavar="N", help="SCALE to N active workers")
    event.add_argument(
        "--shed", default=None, metavar="TARGET=P", help="SHEDDING: keep-probability P for TARGET"
    )
    event.add_argument(
        "--shed-seed", type=int, default=None, metavar="SEED",
        help="with --shed: the seed of the keep draw (default: the seed in force for TARGET, so a "
        "new P keeps a subset or superset of the records the old one kept; another seed, another sample)",
    )  # fmt: skip
    event.add_argument("--reason", default="", help="free text stored in the event")
    send.add_argument(
        "--expect-epoch", type=int, default=None, metavar="E",
        help="apply only if the log is still at epoch E (compare-and-set)",
    )  # fmt: skip
    send.add_argument(
        "--request-id", default="", help="the request's id (a resend with it gets the first answer)"
    )
    send.set_defaults(func=cmd_send)
    log_ = add_command(
        control,
        "log",
        "every event: epoch, time, kind, summary",
        "Print every event of <prefix>.control from its genesis: epoch, time, kind, summary.",
    )
    _common(log_)
    log_.add_argument("--json", action="store_true", help="one JSON object per event")
    log_.add_argument("--last", type=int, default=0, metavar="N", help="only the last N events")
    log_.set_defaults(func=cmd_log)
    table = add_command(
        control,
        "table",
        "the routing table, the migration in flight, the last decision",
        "Print the routing table in force, the paced migration in flight (if any) and "
        "the controller's last decision (from its status on the metrics topic).",
    )
    _common(table)
    table.add_argument("--json", action="store_true", help="one JSON object")
    table.set_defaults(func=cmd_table)
    rebalance = add_command(
        control,
        "rebalance",
        "what the controller's planner would do now",
        "Ask the controller to plan now from its last interval: prints the plan "
        "(realized and predicted max/mean, the keys it would move). --apply starts "
        "the migration.",
    )
    _common(rebalance)
    ControlSettings.add_arguments(rebalance)
    rebalance.add_argument("--apply", action="store_true", help="start the migration (default: dry run)")
    rebalance.set_defaults(func=cmd_rebalance)
    show = add_command(
        control,
        "show",
        "print the events and the folded state",
        "Print every committed event of <prefix>.control from its genesis (one JSON object per "
        "line), then the folded state.",
    )
    _common(show)
    show.set_defaults(func=cmd_show)
    keygen = add_command(
        control,
        "keygen",
        "make the key that signs a control log",
        "Write a new Ed25519 signing key to FILE (mode 0600; an existing file is never replaced) and "
        "print its id and public key. Give its path to the log's writers in "
        "BALLAST_CONTROL_SIGNING_KEY_FILE before `ballast topics create`: the genesis then names the key "
        "and every reader skips a record it did not sign (docs/security.md).",
    )
    keygen.add_argument("file", metavar="FILE", help="where the private key goes (PEM, PKCS#8)")
    keygen.set_defaults(func=cmd_keygen)
