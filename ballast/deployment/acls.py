"""The least-privilege ACL set of one deployment: which principal may do what to which resource.

Why a pure set: ``ballast acls apply`` creates it, ``show`` prints it, ``check`` compares it with
the cluster's bindings, the secured local stack applies it, and docs/security.md shows it as a
table; all of them must mean the same rules. The identities it grants (consumer groups,
transactional ids) are the deployment's defaults, named in :mod:`ballast.kafka.identities`.

Decisions:

* Only the controller may write ``P.control`` and use its writer's transactional id: with the
  signed log (:mod:`ballast.control.signing`) a forgery is skipped, but the ACL keeps one from being
  written at all.
* Topics are granted by literal name (each is declared in :mod:`ballast.kafka.topics`); groups and
  transactional ids by prefix, because each router instance has its own transactional id and
  Spark names its consumer groups ``P.reduce-<uuid>…``.
* Consumers that only read by assignment still need a ``group.id`` (librdkafka asks for its
  coordinator); they all use the prefix ``ballast-scratch.`` (:func:`ballast.kafka.identities.scratch_group`),
  which every principal may use. Nothing is ever committed there, so sharing it harms nobody.
* READ, WRITE imply DESCRIBE in Kafka; DESCRIBE is granted alone only where a principal reads
  offsets without reading records (the shedder).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ballast.control.writer import writer_transactional_id
from ballast.kafka.acls import AclRule
from ballast.kafka.identities import (
    SCRATCH_PREFIX,
    controller_group,
    reduce_group_prefix,
    router_group,
    shedder_id,
)
from ballast.kafka.topics import TopicLayout

SCRATCH_GROUP_PREFIX = SCRATCH_PREFIX
SERVICE_KINDS = ("router", "controller", "reduce", "shedder", "connect")


def control_writer_transactional_id(prefix: str) -> str:
    """The control log writers' transactional id, from the layout's control topic."""
    return writer_transactional_id(TopicLayout(prefix=prefix).name("control"))


@dataclass(frozen=True)
class Principals:
    """The principal of each service kind (``User:<kind>`` on the secured local stack)."""

    router: str = "User:router"
    controller: str = "User:controller"
    reduce: str = "User:reduce"
    shedder: str = "User:shedder"
    connect: str = "User:connect"

    def __post_init__(self) -> None:
        for kind in SERVICE_KINDS:
            value = getattr(self, kind)
            if ":" not in value or not value.split(":", 1)[1]:
                raise ValueError(f"{kind} principal must look like User:name, got {value!r}")


def _topic(principal: str, topic: str, *operations: str) -> list[AclRule]:
    return [AclRule(principal, "topic", topic, "literal", op) for op in operations]


def _group(principal: str, name: str, operation: str = "read", pattern: str = "prefixed") -> AclRule:
    return AclRule(principal, "group", name, pattern, operation)


def deployment_acls(layout: TopicLayout, principals: Principals) -> list[AclRule]:
    """Every binding the services of ``layout``'s deployment need, and nothing more."""
    p, who = layout.prefix, principals
    t = {role: layout.name(role) for role in layout.specs()}
    rules: list[AclRule] = []
    # routers: input and control in; routed (data, markers), metrics and dead letters out;
    # one transactional id per instance, offsets committed in the routers' group
    rules += _topic(who.router, t["input"], "read")
    rules += _topic(who.router, t["control"], "read")
    for role in ("routed", "metrics", "dead_letter"):
        rules += _topic(who.router, t[role], "write")
    rules.append(_group(who.router, router_group(p), pattern="literal"))
    rules.append(AclRule(who.router, "transactional_id", f"{router_group(p)}.", "prefixed", "write"))
    # the controller: the only writer of the control log; requests in (and its clock probes out,
    # stamped by the broker: services/controller/request_age.py), responses out, metrics and the
    # routed topic read (plans and migration progress)
    rules += _topic(who.controller, t["control"], "read", "write")
    rules += _topic(who.controller, t["requests"], "read", "write")  # write: its clock probes
    rules += _topic(who.controller, t["responses"], "write")
    for role in ("metrics", "routed", "input"):
        rules += _topic(who.controller, t[role], "read")
    rules += _topic(who.controller, t["dead_letter"], "write")
    rules += _topic(who.controller, t["metrics"], "write")  # its status records
    rules.append(_group(who.controller, controller_group(p)))
    rules.append(
        AclRule(who.controller, "transactional_id", control_writer_transactional_id(p), "literal", "write")
    )
    # the reduce: routed and control in; output, state chunks (routed), metrics, dead letters out;
    # the input's partitions (describe: the progress markers it expects name them)
    rules += _topic(who.reduce, t["routed"], "read", "write")
    rules += _topic(who.reduce, t["control"], "read")
    rules += _topic(who.reduce, t["input"], "describe")
    for role in ("output", "metrics", "dead_letter"):
        rules += _topic(who.reduce, t[role], "write")
    rules.append(_group(who.reduce, reduce_group_prefix(p)))
    # the shedder: metrics and control (the keep-probabilities in force) in, requests out; offsets
    # (not records) of input, routed and output, and the routers' committed offsets (describe: it
    # can read them, never commit them)
    rules += _topic(who.shedder, t["metrics"], "read")
    rules += _topic(who.shedder, t["control"], "read")
    rules += _topic(who.shedder, t["requests"], "write")
    rules += _topic(who.shedder, t["metrics"], "write")  # its lag samples
    rules += _topic(who.shedder, t["responses"], "read")
    for role in ("input", "routed", "output"):
        rules += _topic(who.shedder, t[role], "describe")
    rules.append(_group(who.shedder, shedder_id(p)))
    rules.append(_group(who.shedder, router_group(p), "describe", "literal"))
    # Kafka Connect sources write input; their worker's own group and topics belong to the Connect
    # cluster, which serves many deployments (connect_worker_acls grants the local stack's)
    rules += _topic(who.connect, t["input"], "write")
    for kind in SERVICE_KINDS:
        rules.append(_group(getattr(who, kind), SCRATCH_GROUP_PREFIX))
    return sorted(set(rules))


def connect_worker_acls(principal: str, group: str, topic_prefix: str) -> list[AclRule]:
    """A Connect worker's own needs: its group, and its config, offset and status topics (created
    by the worker itself, hence ``all``)."""
    return [
        _group(principal, group, pattern="literal"),
        AclRule(principal, "topic", topic_prefix, "prefixed", "all"),
    ]


def missing_rules(wanted: list[AclRule], present: set[AclRule]) -> list[AclRule]:
    """The wanted bindings the cluster lacks (an ``all`` binding covers every operation)."""

    def covered(rule: AclRule) -> bool:
        return rule in present or replace(rule, operation="all") in present

    return [rule for rule in wanted if not covered(rule)]
