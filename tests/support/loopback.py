"""Which addresses a process listens on, read from /proc (Linux): how tests check that Spark's
daemons, executors and drivers bind to loopback only.

Why /proc and not ``ss``: no tool to install, and the sockets are matched to the process by inode,
so a port some other program holds is never counted. Also shipped to Spark executors by the
test applications (``sc.addPyFile``), so it imports nothing outside the standard library.
"""

from __future__ import annotations

import os
from ipaddress import IPv4Address, IPv6Address
from pathlib import Path

LISTEN = "0A"  # TCP state code in /proc/net/tcp*
LOOPBACK = {"127.0.0.1", "::1", "::ffff:127.0.0.1"}


def _address(hex_addr: str) -> str:
    """/proc/net/tcp* notation (per 32-bit word, host byte order, i.e. little endian here) to text."""
    words = [bytes.fromhex(hex_addr[i : i + 8])[::-1] for i in range(0, len(hex_addr), 8)]
    raw = b"".join(words)
    if len(raw) == 4:
        return str(IPv4Address(raw))
    v6 = IPv6Address(raw)
    return f"::ffff:{v6.ipv4_mapped}" if v6.ipv4_mapped else str(v6)


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return inodes
    for fd in fds:
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    return inodes


def listening(pid: int) -> set[tuple[str, int]]:
    """(address, port) of every TCP socket ``pid`` listens on."""
    inodes = _socket_inodes(pid)
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == LISTEN and fields[9] in inodes:
                addr, port = fields[1].rsplit(":", 1)
                found.add((_address(addr), int(port, 16)))
    return found


def not_loopback(addresses: set[tuple[str, int]]) -> set[tuple[str, int]]:
    """The addresses of ``addresses`` that other machines could reach."""
    return {(a, p) for a, p in addresses if a not in LOOPBACK}
