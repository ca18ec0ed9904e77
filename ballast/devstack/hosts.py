"""Hosts of our own on one machine: network namespaces on a private bridge, each with its address.

Why: Ballast must run across hosts (brokers on one, Spark on another, the services on a third),
and a test that runs everything on 127.0.0.1 cannot tell an address that only works locally from
one that works anywhere. A network namespace is a real separate network stack: a process started
in it (:meth:`HostNet.argv`) sees only its own interfaces, so a service that binds or advertises
127.0.0.1 there is unreachable from the other hosts, exactly as on separate machines.

The layout (:func:`plan_hosts`): one Linux bridge in the root namespace holding the gateway address
``<net>.1``, and one namespace per host with a veth pair whose far end has ``<net>.<n>``. Every
name carries one short tag, so several layouts (parallel tests) never collide, and tear-down finds
its own leftovers after a crash from the record written before anything is made
(:func:`teardown`, :func:`teardown_stale`). Needs root (``ip netns``); :func:`available` says
whether this machine allows it, so tests skip with the reason elsewhere.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import secrets
import subprocess
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

RECORD = "hosts.json"
PREFIX = "bl"  # every bridge, namespace and interface name starts with it (and has a tag)
MAX_NAME = 15  # Linux interface names: IFNAMSIZ - 1


class HostNetError(RuntimeError):
    """A namespace, bridge or address could not be made; the message has the command and its output."""


@dataclass(frozen=True)
class Host:
    """One host of a layout: its namespace and its own address on the bridge."""

    name: str  # the layout's name for it ("kafka", "spark", "apps")
    namespace: str
    address: str
    veth: str  # the root namespace's end of its veth pair (the other end is "eth0" inside)


@dataclass
class HostNet:
    """A layout as made (or about to be made): its bridge, gateway, and hosts by name."""

    tag: str
    bridge: str
    network: str  # e.g. 10.201.7.0/24
    gateway: str
    hosts: dict[str, Host] = field(default_factory=dict)
    # what create() made, in order: tear-down removes these and nothing else (a namespace of the
    # same name that was there before is not ours)
    made: list[str] = field(default_factory=list)

    def host(self, name: str) -> Host:
        try:
            return self.hosts[name]
        except KeyError:
            known = ", ".join(self.hosts)
            raise KeyError(f"no host {name!r} in layout {self.tag} (hosts: {known})") from None

    def argv(self, host: str, command: Sequence[str]) -> list[str]:
        """``command`` run inside ``host``'s namespace (it sees only that host's network)."""
        return ["ip", "netns", "exec", self.host(host).namespace, *command]

    def save(self, folder: Path) -> None:
        (folder / RECORD).write_text(json.dumps(asdict(self), indent=2))

    @classmethod
    def load(cls, folder: Path) -> HostNet:
        raw = json.loads((folder / RECORD).read_text())
        hosts = {k: Host(**v) for k, v in raw.pop("hosts").items()}
        return cls(hosts=hosts, **raw)


def plan_hosts(names: Sequence[str], tag: str | None = None, network: str | None = None) -> HostNet:
    """Names and addresses for hosts ``names`` (pure: nothing is made).

    ``network`` defaults to a /24 in 10.200.0.0/13 picked from the tag, private and unlikely to be
    routed on the machine; the bridge holds ``.1``, hosts get ``.2`` onwards in order.
    """
    if not names or len(set(names)) != len(names):
        raise ValueError(f"host names must be distinct and at least one, got {list(names)}")
    tag = tag or secrets.token_hex(2)
    if not tag.isalnum() or len(tag) > 6:
        raise ValueError(f"a tag is up to 6 letters or digits, got {tag!r}")
    if network is None:
        n = int.from_bytes(tag.encode(), "big") % 2048
        network = f"10.{200 + n // 256}.{n % 256}.0/24"
    net = ipaddress.ip_network(network)
    if net.num_addresses < len(names) + 3:
        raise ValueError(f"network {network} is too small for {len(names)} hosts")
    addresses = list(net.hosts())
    hosts = {}
    for i, name in enumerate(names):
        veth = f"{PREFIX}{tag}v{i}"
        if len(veth) > MAX_NAME:
            raise ValueError(f"interface name {veth!r} longer than {MAX_NAME}")
        hosts[name] = Host(name, f"{PREFIX}-{tag}-{name}", str(addresses[i + 1]), veth)
    return HostNet(tag, f"{PREFIX}{tag}br", str(net), str(addresses[0]), hosts)


def available() -> str:
    """Empty when this machine can make namespaces; else why not (for a test's skip reason)."""
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns)"
    try:
        done = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=10)
    except FileNotFoundError:
        return "the ip command (iproute2) is not installed"
    return "" if done.returncode == 0 else f"ip netns does not work here: {done.stderr.strip()}"


def _ip(*args: str, namespace: str = "") -> None:
    argv = ["ip", "netns", "exec", namespace, "ip", *args] if namespace else ["ip", *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise HostNetError(f"`{' '.join(argv)}` failed: {done.stderr.strip() or done.stdout.strip()}")


def create(net: HostNet, folder: Path) -> HostNet:
    """Make ``net``: the record first (so a failure half-way is still torn down), then the bridge and
    each host. On any failure everything made so far is removed before the error propagates."""
    folder.mkdir(parents=True, exist_ok=True)
    net.save(folder)
    prefix_len = ipaddress.ip_network(net.network).prefixlen

    def made(name: str) -> None:
        net.made.append(name)
        net.save(folder)

    try:
        _ip("link", "add", net.bridge, "type", "bridge")
        made(net.bridge)
        _ip("addr", "add", f"{net.gateway}/{prefix_len}", "dev", net.bridge)
        _ip("link", "set", net.bridge, "up")
        for host in net.hosts.values():
            _ip("netns", "add", host.namespace)
            made(host.namespace)
            _ip("link", "add", host.veth, "type", "veth", "peer", "name", f"{host.veth}p")
            made(host.veth)
            _ip("link", "set", f"{host.veth}p", "netns", host.namespace)
            _ip("link", "set", f"{host.veth}p", "name", "eth0", namespace=host.namespace)
            _ip("addr", "add", f"{host.address}/{prefix_len}", "dev", "eth0", namespace=host.namespace)
            _ip("link", "set", "eth0", "up", namespace=host.namespace)
            _ip("link", "set", "lo", "up", namespace=host.namespace)  # its own loopback, as any host has
            _ip("route", "add", "default", "via", net.gateway, namespace=host.namespace)
            _ip("link", "set", host.veth, "master", net.bridge)
            _ip("link", "set", host.veth, "up")
    except Exception:
        teardown(net)
        raise
    return net


def teardown(net: HostNet) -> list[str]:
    """Remove every namespace, veth and bridge ``net`` made that still exists; what was removed.

    Deleting a namespace deletes the veth end inside it, and with it its peer; the host-side end is
    removed too in case its namespace was never made. Idempotent: nothing left is not an error.
    """
    removed = []
    namespaces = _namespaces()
    for name in net.made:
        if name in namespaces:
            _quiet("ip", "netns", "del", name)
            removed.append(name)
    links = _links()
    for name in reversed(net.made):
        if name in links:
            _quiet("ip", "link", "del", name)
            removed.append(name)
    return removed


def leftovers(tag: str = "") -> list[str]:
    """Namespaces and interfaces of our layouts (of ``tag``, or of any) that exist now."""
    found = [n for n in _namespaces() if n.startswith(f"{PREFIX}-{tag}")]
    ours = f"{PREFIX}{tag}"
    found += [n for n in _links() if n.startswith(ours) and (n.endswith("br") or "v" in n[len(PREFIX) :])]
    return sorted(found)


def teardown_stale(folder: Path) -> list[str]:
    """Tear down the layout recorded in ``folder`` (after a crash); nothing recorded: nothing to do."""
    with contextlib.suppress(FileNotFoundError):
        return teardown(HostNet.load(folder))
    return []


def _lines(argv: list[str]) -> list[str]:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    return done.stdout.splitlines() if done.returncode == 0 else []


def _namespaces() -> set[str]:
    return {line.split()[0] for line in _lines(["ip", "netns", "list"]) if line.strip()}


def _links() -> set[str]:
    """Interface names of the root namespace (``ip -o link``: ``5: name@peer: <…>``)."""
    names = set()
    for line in _lines(["ip", "-o", "link", "show"]):
        parts = line.split(":", 2)
        if len(parts) > 1:
            names.add(parts[1].strip().split("@")[0])
    return names


def _quiet(*argv: str) -> None:
    subprocess.run(list(argv), capture_output=True, text=True, timeout=30)
