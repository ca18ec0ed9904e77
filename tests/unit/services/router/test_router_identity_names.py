"""A router's consumer group and transactional.id carry its deployment's prefix.

Why: with the old fixed defaults (group ``ballast-router``, transactional.id
``ballast-router.ballast-router.<id>``) two deployments on one cluster that both ran a router
``r1`` shared a transactional.id, so each start fenced the other, and no ACL could grant one
deployment's routers their group without the other's.
"""

from __future__ import annotations

import pytest

from services.router.config import RouterSettings
from tests.support.router_fakes import LAYOUT, make_router


def test_two_deployments_with_the_same_router_id_get_different_groups_and_transactional_ids():
    given = RouterSettings(router_id="r1")
    orders, payments = given.resolved("orders"), given.resolved("payments")
    assert (orders.group_id, orders.transactional_id) == ("orders.routers", "orders.routers.r1")
    assert (payments.group_id, payments.transactional_id) == ("payments.routers", "payments.routers.r1")
    assert given.resolved("ballast").transactional_id == "ballast.routers.r1"  # the default prefix


def test_explicit_group_and_transactional_id_prefix_are_kept():
    explicit = RouterSettings(router_id="r2", group_id="mine", transactional_id_prefix="tx")
    assert explicit.resolved("orders") == explicit
    assert (explicit.group_id, explicit.transactional_id) == ("mine", "tx.mine.r2")
    grouped = RouterSettings(router_id="r3", transactional_id_prefix="tx").resolved("orders")
    assert grouped.transactional_id == "tx.orders.routers.r3"


def test_resolving_twice_changes_nothing_and_an_unresolved_id_is_refused():
    once = RouterSettings(router_id="r4").resolved("orders")
    assert once.resolved("payments") == once  # the group is set now: another prefix does not move it
    with pytest.raises(ValueError, match="resolved"):
        _ = RouterSettings(router_id="r4").transactional_id


def test_a_router_built_over_a_layout_uses_that_layouts_group():
    router = make_router()  # settings left at their defaults, layout prefix "t"
    assert LAYOUT.prefix == "t"
    assert (router.settings.group_id, router.settings.transactional_id) == ("t.routers", "t.routers.r-test")
    assert router.describe().endswith("group t.routers")
