"""Plain processes on loopback: free ports, pids we may signal, process trees, progress while waiting.

Why one module: the brokers, Connect, Spark's daemons and Ballast's own services are all processes
the local stack starts and must stop again, and "is this pid still ours", "stop it, then make sure",
"what runs below it" are the same questions for each. The rule that keeps ``stack down`` safe lives
here: a recorded pid is signalled only while its command line names the state folder
(:func:`pid_alive` with a ``marker``), so a recycled pid of some other program is never touched.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from string import Template

from ballast.waiting import WaitTimeout, wait_until

PROGRESS_EVERY = 5.0  # seconds between "still waiting" progress lines

Progress = Callable[[str], None]


def quiet(_message: str) -> None:
    """The default progress hook: say nothing."""


class Ticker:
    """Calls ``progress`` with the elapsed time, at most every :data:`PROGRESS_EVERY` seconds."""

    def __init__(self, what: str, progress: Progress) -> None:
        self.what = what
        self.progress = progress
        self.start = time.monotonic()
        self.next = self.start + PROGRESS_EVERY

    def __call__(self) -> None:
        now = time.monotonic()
        if now >= self.next:
            self.progress(f"{self.what}… ({now - self.start:.0f} s)")
            self.next = now + PROGRESS_EVERY


# --- ports ----------------------------------------------------------------------------------------


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def in_namespace(namespace: str, argv: Sequence[str]) -> list[str]:
    """``argv`` run inside network ``namespace`` (a host of :mod:`ballast.devstack.hosts`; "": here).

    ``ip netns exec`` enters the namespace and execs the command, so the pid a caller records is the
    command's own, and its command line is the command's (the pid rule still recognises it)."""
    return ["ip", "netns", "exec", namespace, *argv] if namespace else list(argv)


def free_ports(count: int, host: str = "127.0.0.1", namespace: str = "") -> list[int]:
    """``count`` distinct free ports on ``host`` (held open together, so the kernel never repeats one).

    With ``namespace`` (a host of :mod:`ballast.devstack.hosts`) they are found inside it: its
    address is not this network's, so only a process in the namespace can bind it, and its ports
    are its own (one free here says nothing about one there).
    """
    if namespace:
        argv = in_namespace(namespace, [sys.executable, "-c", _FREE_PORTS, str(count), host])
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        if done.returncode != 0:
            raise OSError(f"no free ports on {host} in namespace {namespace}: {done.stderr.strip()}")
        return [int(p) for p in done.stdout.split()]
    with contextlib.ExitStack() as held:
        socks = [held.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) for _ in range(count)]
        for s in socks:
            s.bind((host, 0))
        return [int(s.getsockname()[1]) for s in socks]


# the same, run by a Python inside a namespace (standard library only: no import of this package there)
_FREE_PORTS = """
import socket, sys
socks = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(int(sys.argv[1]))]
for s in socks:
    s.bind((sys.argv[2], 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))
"""


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


# --- pids -----------------------------------------------------------------------------------------


def pid_alive(pid: int | None, marker: str | None = None) -> bool:
    """True if ``pid`` runs (a zombie does not count) and, when ``marker`` is given, its command
    line mentions ``marker`` (so a recycled pid of some other program is never taken for ours)."""
    if not pid:
        return False
    proc = Path(f"/proc/{pid}")
    try:
        stat = (proc / "stat").read_text()
        cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False
    if stat[stat.rindex(")") + 2] == "Z":  # exited, not yet reaped by its parent
        return False
    return marker is None or marker in cmdline


def _reaped(pid: int) -> bool:
    """Reap ``pid`` if it is our exited child; True when it was."""
    with contextlib.suppress(ChildProcessError):
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return True
    return False


def stop_pid(pid: int | None, marker: str, timeout: float = 30.0, hard: bool = False) -> None:
    """SIGTERM (or SIGKILL when ``hard``) a pid we started, then wait for it to go away."""
    if not pid_alive(pid, marker):
        return
    assert pid is not None
    os.kill(pid, signal.SIGKILL if hard else signal.SIGTERM)

    def gone() -> bool:
        return _reaped(pid) or not pid_alive(pid, marker)

    try:
        wait_until(gone, timeout, f"process {pid} to exit")
    except WaitTimeout:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


# --- process trees --------------------------------------------------------------------------------


def _parents() -> dict[int, int]:
    """pid -> parent pid of every process (from /proc)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    return parents


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (from /proc's parent links)."""
    children: dict[int, list[int]] = {}
    for child, parent in _parents().items():
        children.setdefault(parent, []).append(child)
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def process_groups(pid: int) -> set[int]:
    """The process group of ``pid`` and of everything below it.

    Why groups: Spark starts its JVM and Python workers as children, ``spark-submit`` runs the driver
    in a session of its own; signalling every group below a process reaches all of them, as a
    machine failure or a container stop would.
    """
    groups = set()
    for p in (pid, *descendants(pid)):
        with contextlib.suppress(ProcessLookupError):
            groups.add(os.getpgid(p))
    return groups


def signal_groups(groups: Iterable[int], sig: int) -> None:
    """Send ``sig`` to each process group; groups already gone are skipped."""
    for group in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, sig)


def marked_processes(name: str, value: str, *, prefix: bool = False) -> list[int]:
    """Pids whose environment holds ``name=value`` (``prefix``: a value starting with ``value``),
    our own process excepted.

    Why the environment: a service's children (Spark's JVM, its Python workers) inherit it but not
    the service's command line, so an environment marker set by the supervisor finds every process
    a service left behind, however it was started.
    """
    wanted = f"{name}={value}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if stat[stat.rindex(")") + 2] == "Z":
            continue
        items = environ.split(b"\0")
        if any(item.startswith(wanted) for item in items) if prefix else wanted in items:
            found.append(int(entry.name))
    return found


# --- files ----------------------------------------------------------------------------------------


def render_template(template: Path, target: Path, **values: object) -> None:
    """A config file from one of deploy/'s ``$name`` templates."""
    target.write_text(Template(template.read_text()).substitute({k: str(v) for k, v in values.items()}))


def tail(path: str | Path, lines: int = 25) -> str:
    """The last lines of a log, for an error message."""
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
