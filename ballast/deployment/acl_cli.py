"""``ballast acls apply|show|check``: the deployment's least-privilege ACLs on a user's own cluster.

Why a command and not a script in docs: the set follows the topic prefix and the services'
identities, and an operator needs the same three answers Kafka's ``kafka-acls`` gives, for this
set: create it, print it, and "is it all there". ``check`` exits 1 when anything is missing, so a
deployment pipeline can gate on it.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from typing import ClassVar

from ballast.cli.connection import ConnectionSettings
from ballast.cli.console import add_command, print_table
from ballast.deployment.acls import SERVICE_KINDS, Principals, deployment_acls, missing_rules
from ballast.kafka.acls import AclRule, AuthorizerMissing, list_acls
from ballast.kafka.admin import make_admin
from ballast.kafka.topics import LayoutSettings, TopicLayout
from ballast.settings import Settings, setting


@dataclass(frozen=True)
class AclSettings(Settings):
    """The principal of each service kind (as the cluster's authorizer names it)."""

    ENV_PREFIX: ClassVar[str] = "BALLAST_ACLS_"

    router_principal: str = setting("User:router", "principal of the routers")
    controller_principal: str = setting("User:controller", "principal of the controller")
    reduce_principal: str = setting("User:reduce", "principal of the Spark reduce (driver and executors)")
    shedder_principal: str = setting("User:shedder", "principal of the shedder")
    connect_principal: str = setting("User:connect", "principal of the Kafka Connect workers")

    def principals(self) -> Principals:
        return Principals(**{kind: getattr(self, f"{kind}_principal") for kind in SERVICE_KINDS})


def wanted(args: argparse.Namespace) -> tuple[TopicLayout, list[AclRule]]:
    layout = LayoutSettings.from_args(args).layout()
    return layout, deployment_acls(layout, AclSettings.from_args(args).principals())


def _print(rules: list[AclRule], as_json: bool) -> None:
    if as_json:
        print(json.dumps([asdict(r) for r in rules], indent=2))
        return
    print_table(
        ("principal", "operation", "resource", "pattern", "name"),
        [(r.principal, r.operation, r.resource, r.pattern, r.name) for r in rules],
    )


def cmd_acls_show(args: argparse.Namespace) -> int:
    _layout, rules = wanted(args)
    _print(rules, args.json)
    return 0


def cmd_acls_apply(args: argparse.Namespace) -> int:
    from ballast.deployment.create import grant_deployment

    layout = LayoutSettings.from_args(args).layout()
    principals = AclSettings.from_args(args).principals()
    kafka = ConnectionSettings.from_args(args).checked_kafka_config("ballast-acls")
    try:
        created, present = grant_deployment(kafka, layout, principals)
    except AuthorizerMissing as exc:
        print(f"error: {exc}; nothing applied", file=sys.stderr)
        return 1
    where = f"ACLs of prefix {layout.prefix!r} on {kafka.bootstrap_servers}"
    print(f"{where}: {created} created, {present} already present")
    return 0


@dataclass(frozen=True)
class AclCheck:
    """What ``check`` found: the wanted rules missing, and the principals' rules beyond the set."""

    authorizer: bool
    missing: list[AclRule]
    other: list[AclRule]

    @property
    def complete(self) -> bool:
        return self.authorizer and not self.missing

    def to_json(self) -> dict[str, object]:
        return {
            "authorizer": self.authorizer,
            "complete": self.complete,
            "missing": [asdict(r) for r in self.missing],
            "other": [asdict(r) for r in self.other],
        }


def check_acls(rules: list[AclRule], present: set[AclRule] | None) -> AclCheck:
    """``present`` None: the cluster has no authorizer, so the whole set is missing."""
    if present is None:
        return AclCheck(False, list(rules), [])
    principals, wanted_set = {r.principal for r in rules}, set(rules)
    other = sorted(r for r in present if r.principal in principals and r not in wanted_set)
    return AclCheck(True, missing_rules(rules, present), other)


def cmd_acls_check(args: argparse.Namespace) -> int:
    layout, rules = wanted(args)
    kafka = ConnectionSettings.from_args(args).checked_kafka_config("ballast-acls")
    problem = ""
    try:
        present: set[AclRule] | None = list_acls(make_admin(kafka))
    except AuthorizerMissing as exc:
        present, problem = None, str(exc)
    found = check_acls(rules, present)
    if args.json:
        print(json.dumps(found.to_json() | {"prefix": layout.prefix, "problem": problem}, indent=2))
        return 0 if found.complete else 1
    if problem:
        print(f"not enforced: {problem}")
    if found.complete:
        print(f"complete: all {len(rules)} ACLs of prefix {layout.prefix!r} are present")
    else:
        print(f"incomplete: {len(found.missing)} of {len(rules)} ACLs of prefix {layout.prefix!r} missing:")
        _print(found.missing, False)
    if found.other:
        print(f"{len(found.other)} other ACL(s) of these principals (not in the least-privilege set):")
        _print(found.other, False)
    return 0 if found.complete else 1


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``acls`` to the ``ballast`` command."""
    acls = add_command(sub, "acls", "the least-privilege ACLs of a deployment")
    acls_sub = acls.add_subparsers(dest="action", required=True, metavar="ACTION")
    commands = (
        ("apply", cmd_acls_apply, True, "create the missing ACLs of the deployment's prefix (idempotent)"),
        ("show", cmd_acls_show, False, "print the ACLs the deployment needs (no broker needed)"),
        ("check", cmd_acls_check, True, "compare the cluster's ACLs with the set; exit 1 if any is missing"),
    )
    for name, func, needs_broker, text in commands:
        parser = add_command(acls_sub, name, text)
        if needs_broker:
            ConnectionSettings.add_arguments(parser)
        LayoutSettings.add_arguments(parser, only=("prefix",))
        AclSettings.add_arguments(parser)
        if name != "apply":
            parser.add_argument("--json", action="store_true", help="machine-readable output")
        parser.set_defaults(func=func)
