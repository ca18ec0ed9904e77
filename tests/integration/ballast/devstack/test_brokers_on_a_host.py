"""Brokers on a host of their own (ballast/devstack/hosts.py): a stack started in a namespace binds
and advertises that host's address only, and a client on another host produces and consumes
through it. The first step of the three-host layout (docs/deploy.md)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ballast.devstack import hosts
from ballast.devstack.stack import start_stack, stop_stack

pytestmark = pytest.mark.skipif(bool(hosts.available()), reason=hosts.available() or "available")

CLIENT = """
import json, sys
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
bootstrap = sys.argv[1]
admin = AdminClient({"bootstrap.servers": bootstrap})
admin.create_topics([NewTopic("t", 1, 1)])["t"].result()
p = Producer({"bootstrap.servers": bootstrap})
for i in range(100):
    p.produce("t", str(i).encode())
assert p.flush(30) == 0
c = Consumer({"bootstrap.servers": bootstrap, "group.id": "g", "auto.offset.reset": "earliest"})
c.assign([TopicPartition("t", 0, 0)])
got = []
while len(got) < 100:
    got += [m.value().decode() for m in c.consume(100, 10) if m.error() is None]
print(json.dumps({"got": len(got), "brokers": [b.host for b in c.list_topics(timeout=10).brokers.values()]}))
"""


def listening(net: hosts.HostNet, host: str) -> list[str]:
    """The addresses ``host``'s listening TCP sockets are bound to (IPv4-mapped ones unwrapped)."""
    out = subprocess.run(net.argv(host, ["ss", "-Htln"]), capture_output=True, text=True, check=True).stdout
    local = [line.split()[3].rsplit(":", 1)[0] for line in out.splitlines() if line.strip()]
    return [a.strip("[]").removeprefix("::ffff:") for a in local]


def test_a_broker_on_its_host_serves_another_host_and_never_loopback(tmp_path) -> None:
    net = hosts.create(hosts.plan_hosts(["kafka", "apps"]), tmp_path / "net")
    kafka = net.host("kafka")
    try:
        state = start_stack(tmp_path / "stack", brokers=1, host=kafka.address, namespace=kafka.namespace)
        try:
            assert state.bootstrap == f"{kafka.address}:{state.nodes[0].port}"
            sockets = listening(net, "kafka")
            assert sockets and set(sockets) == {kafka.address}, sockets
            done = subprocess.run(net.argv("apps", [sys.executable, "-c", CLIENT, state.bootstrap]),
                                  capture_output=True, text=True, timeout=120)  # fmt: skip
            assert done.returncode == 0, done.stderr[-2000:]
            answer = json.loads(done.stdout.strip().splitlines()[-1])
            assert answer == {"got": 100, "brokers": [kafka.address]}
        finally:
            stop_stack(tmp_path / "stack")
    finally:
        hosts.teardown(net)
    assert hosts.leftovers(net.tag) == []
