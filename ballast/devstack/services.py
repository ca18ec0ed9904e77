"""Ballast's own services (routers, the reduce, later the controller and the shedder) as supervised
processes of the local stack, each started with its own ``ballast … run`` command.

Why the devstack runs them, and the same way for everyone: a user's ``ballast stack up --pipeline``,
the demo, the benchmarks and the end-to-end tests all need "start this service, know when it is
ready, stop it cleanly, or kill it like a machine failure, and leave nothing behind". Written once
here, a service runs under test exactly as it runs for users: its own process, its own command
line, its own log, talking to the others only through Kafka.

What a started service gets:

* a folder ``<state>/services/<name>/`` with ``service.log`` (stderr), ``service.out`` (stdout:
  what the command answers, e.g. a router's totals at exit) and ``ready.json``;
* ``--state-dir <state>`` on its command line (unless given), so it finds the stack's brokers and
  so :func:`~ballast.devstack.processes.pid_alive` recognises it as this folder's;
* environment: ``PYTHONPATH`` = this checkout (a service runs the code that started it, also from a
  second worktree), :data:`~ballast.readiness.READY_FILE_ENV` (it writes ``ready.json`` when ready),
  :data:`SUPERVISED_ENV` = its folder (inherited by every process it starts: Spark's JVM, Python
  workers), and what the caller adds (secrets, settings);
* a session of its own: a signal to it, or Ctrl-C in the terminal that started it, does not reach
  the supervisor, and a group signal reaches the service's whole group.

Stopping (:func:`stop_service`): SIGTERM to the pid, as Docker sends it (each service finishes its
open work); after ``timeout``, SIGKILL to every process group below it; then every process still
carrying its marker is killed, so nothing of a service outlives ``stack down``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ballast.devstack.processes import (
    Progress,
    Ticker,
    in_namespace,
    marked_processes,
    pid_alive,
    process_groups,
    quiet,
    signal_groups,
    tail,
)
from ballast.devstack.state import ServiceState, StackError, StackState
from ballast.paths import PROJECT_ROOT
from ballast.readiness import READY_FILE_ENV, read_ready
from ballast.waiting import WaitTimeout, wait_until

SERVICES_DIR = "services"
SUPERVISED_ENV = "BALLAST_SUPERVISED_BY"
STOP_TIMEOUT_S = 60.0

# handles of the services this process started: the exit code of our own children, and "still
# starting" (a child between fork and exec shows its parent's command line, not its own)
_children: dict[int, subprocess.Popen[bytes]] = {}


@dataclass(frozen=True)
class ServiceCommand:
    """A service to start: its name in the stack, its kind, and the ``ballast`` arguments that run it."""

    name: str
    kind: str
    args: tuple[str, ...]  # after ``ballast``, e.g. ("router", "run", "--router-id", "r1")
    env: Mapping[str, str] = field(default_factory=dict)  # secrets go here, never into args
    # a program other than ``ballast`` (e.g. a producer of the user's, a test's stand-in); it is
    # given ``args`` too, but no ``--state-dir``
    program: tuple[str, ...] = ()
    # the network namespace it runs in (a host of ballast.devstack.hosts; "": this machine's own)
    namespace: str = ""

    def __post_init__(self) -> None:
        if not self.name or any(c in self.name for c in " /"):
            raise ValueError(f"a service name is a token without spaces or slashes, got {self.name!r}")

    def argv(self, state_dir: str) -> list[str]:
        """The command line: ``ballast <args> --state-dir <state>`` (so the pid rule recognises it as
        the folder's), or ``program`` with ``args``; inside ``namespace`` when it has one."""
        if self.program:
            return in_namespace(self.namespace, [*self.program, *self.args])
        args = list(self.args)
        if "--state-dir" not in args:
            args += ["--state-dir", state_dir]
        return in_namespace(self.namespace, ballast_argv(args))


def ballast_argv(args: Sequence[str]) -> list[str]:
    """The ``ballast`` command with ``args``, run by this interpreter (the venv's, this checkout's)."""
    return [sys.executable, "-m", "ballast.cli", *args]


def service_dir(state: StackState, name: str) -> Path:
    return Path(state.state_dir) / SERVICES_DIR / name


def is_running(state: StackState, service: ServiceState) -> bool:
    """Whether the service still runs (through its handle when this process started it; else its
    pid, while its command line still names the state folder or its own)."""
    child = _children.get(service.pid or 0)
    if child is not None:
        return child.poll() is None
    return pid_alive(service.pid, state.state_dir)


def start_service(state: StackState, command: ServiceCommand, progress: Progress = quiet) -> ServiceState:
    """Start ``command`` as a service of ``state``'s folder (recorded in ``stack.json``).

    A service of that name that still runs is an error (names are how the stack tells its services
    apart); one that ended is replaced, its log kept and appended to.
    """
    existing = state.service(command.name)
    if existing is not None and is_running(state, existing):
        raise StackError(f"service {command.name} already runs (pid {existing.pid}); stop it first")
    folder = service_dir(state, command.name)
    folder.mkdir(parents=True, exist_ok=True)
    argv = command.argv(state.state_dir)
    ready = folder / "ready.json"
    ready.unlink(missing_ok=True)
    env = dict(os.environ)
    env.update(command.env)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(PROJECT_ROOT), env.get("PYTHONPATH", ""))))
    env[READY_FILE_ENV] = str(ready)
    env[SUPERVISED_ENV] = str(folder)
    service = ServiceState(
        name=command.name,
        kind=command.kind,
        argv=argv,
        log=str(folder / "service.log"),
        out=str(folder / "service.out"),
        ready_file=str(ready),
        started_at=time.time(),
    )
    progress(f"starting {command.kind} service {command.name}…")
    with open(service.log, "ab") as log, open(service.out, "ab") as out:
        child = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=log,
            env=env,
            cwd=folder,
            start_new_session=True,
        )
    _children[child.pid] = child
    service.pid = child.pid
    state.services = [s for s in state.services if s.name != command.name] + [service]
    state.save()
    return service


def exit_code(service: ServiceState) -> int | None:
    """The service's exit code, when this process started it and it has ended."""
    child = _children.get(service.pid or 0)
    return None if child is None else child.poll()


def wait_ready(
    state: StackState, name: str, timeout: float = 120.0, progress: Progress = quiet
) -> dict[str, Any]:
    """Until the service announced it is ready (its ``ready.json``); what it announced.

    A service that exits first fails the wait at once, with the end of its log: a router with a
    flag that contradicts the control log's genesis exits within a second, and waiting out the
    whole timeout would only hide why.
    """
    service = _service(state, name)
    tick = Ticker(f"waiting for {name}", progress)

    def ready() -> dict[str, Any] | None:
        tick()
        announced = read_ready(service.ready_file)
        if announced is not None:
            return announced
        if not is_running(state, service):
            code = exit_code(service)
            ended = f"exited {code}" if code is not None else "is not running"
            raise StackError(
                f"service {name} {ended} before it was ready; see {service.log}:\n{tail(service.log)}"
            )
        return None

    try:
        return wait_until(ready, timeout, f"service {name} ready", interval=0.1)
    except WaitTimeout as exc:
        raise StackError(f"{exc}; see {service.log}:\n{tail(service.log)}") from None


def _service(state: StackState, name: str) -> ServiceState:
    service = state.service(name)
    if service is None:
        raise StackError(f"no service {name} recorded in {state.state_dir}")
    return service


def signal_service(state: StackState, name: str, sig: int = signal.SIGKILL, *, group: bool = True) -> None:
    """Send ``sig`` to the service: to every process group below it (``group``, a machine failure or
    a container stop), or to its pid alone."""
    service = _service(state, name)
    if not is_running(state, service) or service.pid is None:
        return
    if group:
        signal_groups(process_groups(service.pid), sig)
    else:
        os.kill(service.pid, sig)


def wait_exit(state: StackState, name: str, timeout: float) -> bool:
    """Until the service's process is gone (reaped when it is our child); False on time-out."""
    service = _service(state, name)
    try:
        wait_until(lambda: not is_running(state, service), timeout, f"service {name} to exit", interval=0.1)
        return True
    except WaitTimeout:
        return False


def stop_service(state: StackState, name: str, timeout: float = STOP_TIMEOUT_S) -> int | None:
    """Stop one service: SIGTERM, then SIGKILL to its groups after ``timeout``, then whatever still
    carries its marker; returns its exit code when known. Safe to call for one already stopped."""
    service = _service(state, name)
    if is_running(state, service) and service.pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(service.pid, signal.SIGTERM)
        if not wait_exit(state, name, timeout):
            signal_groups(process_groups(service.pid), signal.SIGKILL)
            wait_exit(state, name, 10.0)
    _sweep(str(service_dir(state, name)))
    service.exit_code = exit_code(service)
    _children.pop(service.pid or 0, None)
    service.pid = None
    state.save()
    return service.exit_code


def _sweep(marker: str) -> None:
    """Kill every process still carrying ``marker`` (a JVM or Python worker a service left behind)."""
    left = marked_processes(SUPERVISED_ENV, marker)
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    if left:
        with contextlib.suppress(WaitTimeout):
            wait_until(lambda: not marked_processes(SUPERVISED_ENV, marker), 10.0, "leftover processes")


def stop_services(
    state: StackState, names: Sequence[str] | None = None, timeout: float = STOP_TIMEOUT_S
) -> None:
    """Stop the recorded services (only ``names``, when given), the last started first, all
    signalled before any is waited for."""
    chosen = [s for s in reversed(state.services) if names is None or s.name in names]
    for service in chosen:
        if is_running(state, service) and service.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(service.pid, signal.SIGTERM)
    for service in chosen:
        stop_service(state, service.name, timeout)


def stack_processes(state_dir: str | Path) -> list[int]:
    """Every live process that a service of this folder started, however deep below it."""
    return marked_processes(SUPERVISED_ENV, str(Path(state_dir).resolve() / SERVICES_DIR), prefix=True)


def service_status(state: StackState) -> list[dict[str, Any]]:
    """Each recorded service: pid, running, ready, log and output files, exit code when known."""
    rows = []
    for s in state.services:
        running = is_running(state, s)
        rows.append(
            {
                "name": s.name,
                "kind": s.kind,
                "pid": s.pid,
                "running": running,
                "ready": running and read_ready(s.ready_file) is not None,
                "log": s.log,
                "out": s.out,
                "exit_code": s.exit_code if s.exit_code is not None else exit_code(s),
                "command": " ".join(s.argv),
            }
        )
    return rows
