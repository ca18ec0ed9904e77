"""The TCP sockets of a host of :mod:`ballast.devstack.hosts`, with the processes that own them.

Why one reader: the tests across hosts all ask the same question, "does anything of the layout
listen on or talk to loopback?", and it is answered the same way: ``ss`` run inside the host's
network namespace (which sees only that host's sockets), every owner's command line read at once
(the owners end with the test).
"""

from __future__ import annotations

import ipaddress
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ballast.devstack import hosts


@dataclass(frozen=True)
class Socket:
    state: str  # ss's: LISTEN, ESTAB, SYN-SENT, …
    address: str  # local, IPv4-mapped addresses unwrapped
    port: int
    peer: str  # "*" for a listening socket
    peer_port: int
    owners: dict[int, str]  # pid: its command line

    @property
    def listening(self) -> bool:
        return self.state == "LISTEN"

    @property
    def on_loopback(self) -> bool:
        """Bound to loopback, or connected to it."""
        return _loopback(self.address) or _loopback(self.peer)

    @property
    def wildcard(self) -> bool:
        """Bound to every address (loopback included)."""
        return self.address in ("0.0.0.0", "::", "*")


def sockets(net: hosts.HostNet, host: str, *, listening_only: bool = False) -> list[Socket]:
    """Every TCP socket of ``host`` (listening ones only, with ``listening_only``)."""
    flags = "-Htlnp" if listening_only else "-Htanp"
    out = subprocess.run(net.argv(host, ["ss", flags]), capture_output=True, text=True, check=True).stdout
    found = []
    for line in out.splitlines():
        fields = line.split()
        if len(fields) < 5:
            continue
        address, port = _split(fields[3])
        peer, peer_port = _split(fields[4])
        owners = {int(p): cmdline(int(p)) for p in re.findall(r"pid=(\d+)", line)}
        found.append(Socket(fields[0], address, port, peer, peer_port, owners))
    return found


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _split(endpoint: str) -> tuple[str, int]:
    address, _, port = endpoint.rpartition(":")
    address = address.strip("[]").removeprefix("::ffff:")
    if "%" in address:  # an address bound to one interface: 127.0.0.1%lo
        address = address.split("%", 1)[0]
    return address, int(port) if port.isdigit() else 0


def _loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False
