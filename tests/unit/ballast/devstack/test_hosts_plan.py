"""Planning a layout of hosts (ballast/devstack/hosts.py): names and addresses, nothing made."""

from __future__ import annotations

import ipaddress

import pytest

from ballast.devstack.hosts import MAX_NAME, HostNet, plan_hosts


def test_each_host_has_its_own_address_on_the_bridges_network() -> None:
    net = plan_hosts(["kafka", "spark", "apps"], tag="ab12")
    network = ipaddress.ip_network(net.network)
    addresses = [h.address for h in net.hosts.values()]
    assert len(set(addresses)) == 3 and net.gateway not in addresses
    assert all(ipaddress.ip_address(a) in network for a in [*addresses, net.gateway])
    assert network.is_private and not any(ipaddress.ip_address(a).is_loopback for a in addresses)
    names = [net.bridge, *(h.veth for h in net.hosts.values())]
    assert all(len(n) <= MAX_NAME for n in names) and all("ab12" in n for n in names)
    assert net.argv("spark", ["true"]) == ["ip", "netns", "exec", "bl-ab12-spark", "true"]


def test_two_tags_never_share_a_name(tmp_path) -> None:
    one, two = plan_hosts(["a", "b"], tag="x1"), plan_hosts(["a", "b"], tag="x2")
    def names(net: HostNet) -> set[str]:
        return {net.bridge, *(h.veth for h in net.hosts.values()), *(h.namespace for h in net.hosts.values())}

    assert not names(one) & names(two)
    one.save(tmp_path)
    assert HostNet.load(tmp_path) == one


@pytest.mark.parametrize("names", [[], ["a", "a"]])
def test_host_names_are_distinct(names) -> None:
    with pytest.raises(ValueError):
        plan_hosts(names)


def test_a_tag_is_short_and_plain() -> None:
    with pytest.raises(ValueError, match="tag"):
        plan_hosts(["a"], tag="too-long-tag")
    with pytest.raises(KeyError, match="no host 'c'"):
        plan_hosts(["a"], tag="t").host("c")
