"""The names a deployment's ACLs grant: each carries the deployment's prefix, and every scratch
group the one well-known prefix (ballast.kafka.identities)."""

from __future__ import annotations

import pytest

from ballast.kafka import identities


def test_scratch_groups_carry_the_scratch_prefix_and_their_purpose_and_differ_per_call():
    ids = [identities.scratch_group("control-reader") for _ in range(50)]
    assert all(i.startswith("ballast-scratch.control-reader.") for i in ids)
    assert len(set(ids)) == len(ids)  # never one group for two readers
    assert identities.SCRATCH_PREFIX == "ballast-scratch."


@pytest.mark.parametrize("purpose", ["", "a b", "a/b"])
def test_a_scratch_purpose_must_be_a_token(purpose):
    with pytest.raises(ValueError):
        identities.scratch_group(purpose)


def test_every_deployment_name_starts_with_its_prefix():
    assert identities.router_group("orders") == "orders.routers"
    assert identities.router_transactional_id("orders.routers", "r1") == "orders.routers.r1"
    assert identities.router_transactional_id("orders.routers", "r1", "tx") == "tx.orders.routers.r1"
    assert identities.shedder_id("orders") == "orders.shedder"
    assert identities.controller_group("orders") == "orders.controller"
    assert identities.reduce_group_prefix("orders") == "orders.reduce"
