"""Hosts of our own (ballast/devstack/hosts.py): namespaces on a bridge reach each other by their
addresses, not by loopback, and tear-down leaves nothing, also after a failed start."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from ballast.devstack import hosts

pytestmark = pytest.mark.skipif(bool(hosts.available()), reason=hosts.available() or "available")

SERVE = "import socket,sys;s=socket.socket();s.bind((sys.argv[1],9999));s.listen();s.accept()[0].send(b'hi')"
ASK = "import socket,sys;print(socket.create_connection((sys.argv[1],9999),timeout=3).recv(2).decode())"


def ask(net: hosts.HostNet, host: str, address: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(net.argv(host, [sys.executable, "-c", ASK, address]), capture_output=True,
                          text=True, timeout=30)  # fmt: skip


def test_hosts_reach_each_other_by_address_and_not_by_loopback(tmp_path) -> None:
    net = hosts.create(hosts.plan_hosts(["server", "client"]), tmp_path)
    servers = []
    try:
        address = net.host("server").address
        for bind in (address, "127.0.0.1"):
            servers.append(subprocess.Popen(net.argv("server", [sys.executable, "-c", SERVE, bind])))
        time.sleep(1.0)
        assert ask(net, "client", address).stdout.strip() == "hi"
        # the server's own loopback is its own: the client's 127.0.0.1 is another host's loopback
        refused = ask(net, "client", "127.0.0.1")
        assert refused.returncode != 0 and "refused" in refused.stderr.lower()
        assert sorted(hosts.leftovers(net.tag)) == sorted(
            [net.bridge, *(h.veth for h in net.hosts.values()), *(h.namespace for h in net.hosts.values())]
        )
    finally:
        for proc in servers:
            proc.kill()
            proc.wait()
        hosts.teardown(net)
    assert hosts.leftovers(net.tag) == []


def test_a_failed_start_removes_what_it_made_and_the_record_allows_a_later_clean_up(tmp_path) -> None:
    net = hosts.plan_hosts(["a", "b"])
    clash = net.hosts["b"].namespace
    subprocess.run(["ip", "netns", "add", clash], check=True)  # "b" cannot be made
    try:
        with pytest.raises(hosts.HostNetError, match=clash):
            hosts.create(net, tmp_path)
        assert hosts.leftovers(net.tag) == [clash]  # only what was there before
    finally:
        subprocess.run(["ip", "netns", "del", clash], check=False)
    net2 = hosts.plan_hosts(["a"])
    hosts.create(net2, tmp_path)
    assert hosts.teardown_stale(tmp_path) and hosts.leftovers(net2.tag) == []
