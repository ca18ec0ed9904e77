"""The least-privilege ACL set (ballast/deployment/acls.py) and what ``acls check`` reports."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ballast.deployment.acl_cli import check_acls
from ballast.deployment.acls import (
    SCRATCH_GROUP_PREFIX,
    Principals,
    control_writer_transactional_id,
    deployment_acls,
    missing_rules,
)
from ballast.kafka.acls import AclRule
from ballast.kafka.topics import TopicLayout

LAYOUT = TopicLayout(prefix="shop")
WHO = Principals()
RULES = deployment_acls(LAYOUT, WHO)


def allowed(principal: str, operation: str, resource: str, name: str) -> bool:
    """Whether the set lets ``principal`` do ``operation`` on ``name``, as Kafka matches bindings
    (literal: equal names; prefixed: a prefix; ``all`` covers every operation; read and write imply
    describe)."""
    implied = {"describe": {"describe", "read", "write", "all"}, "read": {"read", "all"}}
    granting = implied.get(operation, {operation, "all"})
    for r in RULES:
        if r.principal != principal or r.resource != resource or r.operation not in granting:
            continue
        matches = name == r.name if r.pattern == "literal" else name.startswith(r.name)
        if matches:
            return True
    return False


def test_only_the_controller_writes_the_control_log_and_holds_its_transactional_id() -> None:
    control = LAYOUT.name("control")
    writers = {r.principal for r in RULES if (r.resource, r.name, r.operation) == ("topic", control, "write")}
    assert writers == {WHO.controller}
    tid = control_writer_transactional_id("shop")
    holders = {r.principal for r in RULES if r.resource == "transactional_id" and tid.startswith(r.name)}
    assert holders == {WHO.controller}


@pytest.mark.parametrize(
    ("who", "operation", "topic_role"),
    [
        ("router", "read", "input"), ("router", "read", "control"), ("router", "write", "routed"),
        ("router", "write", "metrics"), ("router", "write", "dead_letter"),
        ("reduce", "read", "routed"), ("reduce", "write", "routed"), ("reduce", "read", "control"),
        ("reduce", "write", "output"), ("reduce", "write", "metrics"), ("reduce", "write", "dead_letter"),
        ("shedder", "read", "metrics"), ("shedder", "write", "requests"), ("shedder", "describe", "input"),
        ("shedder", "describe", "routed"), ("controller", "read", "requests"),
        ("controller", "write", "responses"), ("connect", "write", "input"),
        ("controller", "write", "requests"), ("shedder", "write", "metrics"), ("shedder", "read", "control"),
        ("reduce", "describe", "input"), ("controller", "write", "metrics"),
    ],
)  # fmt: skip
def test_each_service_may_do_its_job(who: str, operation: str, topic_role: str) -> None:
    assert allowed(getattr(WHO, who), operation, "topic", LAYOUT.name(topic_role))


@pytest.mark.parametrize(
    ("who", "operation", "topic_role"),
    [
        ("router", "write", "control"), ("router", "read", "routed"), ("router", "write", "input"),
        ("shedder", "write", "control"), ("shedder", "write", "routed"), ("shedder", "read", "input"),
        ("shedder", "read", "routed"), ("reduce", "write", "control"), ("reduce", "read", "input"),
        ("connect", "read", "input"), ("connect", "write", "control"), ("controller", "write", "routed"),
    ],
)  # fmt: skip
def test_and_nothing_beyond_it(who: str, operation: str, topic_role: str) -> None:
    assert not allowed(getattr(WHO, who), operation, "topic", LAYOUT.name(topic_role))


def test_groups_and_transactional_ids_are_the_deployments_own() -> None:
    assert allowed(WHO.router, "read", "group", "shop.routers")
    assert not allowed(WHO.reduce, "read", "group", "shop.routers")  # may not commit the routers' offsets
    assert allowed(WHO.shedder, "describe", "group", "shop.routers")  # reads them
    assert not allowed(WHO.shedder, "read", "group", "shop.routers")
    assert allowed(WHO.router, "write", "transactional_id", "shop.routers.r1")
    assert not allowed(WHO.router, "write", "transactional_id", "other.routers.r1")
    assert allowed(WHO.reduce, "read", "group", "shop.reduce-1a2b-driver")  # Spark's groupIdPrefix
    for kind in ("router", "controller", "reduce", "shedder", "connect"):
        assert allowed(getattr(WHO, kind), "read", "group", f"{SCRATCH_GROUP_PREFIX}follow.1234")


def test_two_deployments_share_no_topic_group_or_transactional_id() -> None:
    other = deployment_acls(TopicLayout(prefix="shop2"), WHO)
    names = {(r.resource, r.name) for r in RULES if not r.name.startswith(SCRATCH_GROUP_PREFIX)}
    for r in other:
        if r.name.startswith(SCRATCH_GROUP_PREFIX):
            continue
        # a prefixed name of one deployment never covers a name of the other
        assert (r.resource, r.name) not in names
        assert not any(n.startswith(r.name) for _res, n in names if r.pattern == "prefixed"), r


def test_a_principal_must_name_its_type() -> None:
    with pytest.raises(ValueError, match="User:name"):
        Principals(router="router")


def test_check_reports_what_is_missing_and_what_is_beyond() -> None:
    assert check_acls(RULES, set(RULES)).complete
    present = set(RULES[1:]) | {AclRule(WHO.router, "topic", "shop.control", "literal", "write")}
    found = check_acls(RULES, present)
    assert not found.complete and found.missing == [RULES[0]]
    assert found.other == [AclRule(WHO.router, "topic", "shop.control", "literal", "write")]
    everything = replace(RULES[0], operation="all")
    assert missing_rules(RULES, set(RULES[1:]) | {everything}) == []  # `all` covers the operation
    open_cluster = check_acls(RULES, None)
    assert not open_cluster.complete and not open_cluster.authorizer and open_cluster.missing == RULES
