"""The supervisor of the stack's services, on stand-in programs (no broker needed): readiness, a
service that exits before it is ready, stop escalating to SIGKILL for one that ignores SIGTERM, and
the sweep of a grandchild that outlived its service (what a Spark JVM would be)."""

from __future__ import annotations

import signal
import sys
import textwrap

import pytest

from ballast.devstack.processes import pid_alive
from ballast.devstack.services import (
    ServiceCommand,
    is_running,
    stack_processes,
    start_service,
    stop_service,
    stop_services,
    wait_ready,
)
from ballast.devstack.state import StackError, StackState

# ready at once, then a grandchild in its own session (so a group signal misses it), then
# SIGTERM ignored: only SIGKILL stops it, and only the marker finds the grandchild
STUBBORN = textwrap.dedent(
    """
    import os, signal, subprocess, sys, time
    from ballast.readiness import announce_ready
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    announce_ready("stub", child=child.pid)
    print("ready", flush=True)
    time.sleep(600)
    """
)


def stub(name: str, code: str) -> ServiceCommand:
    return ServiceCommand(name, "stub", ("-c", code), program=(sys.executable,))


def test_ready_then_stop_escalates_and_sweeps_what_the_service_left(tmp_path):
    state = StackState.load_or_new(tmp_path)
    start_service(state, stub("stubborn", STUBBORN))
    announced = wait_ready(state, "stubborn", timeout=60)
    grandchild = announced["child"]
    assert pid_alive(grandchild) and set(stack_processes(tmp_path)) >= {grandchild}
    stop_service(state, "stubborn", timeout=2.0)  # it ignores SIGTERM: only the escalation ends it
    assert not pid_alive(grandchild) and stack_processes(tmp_path) == []
    recorded = StackState.load(tmp_path).service("stubborn")
    assert recorded is not None and recorded.pid is None and recorded.exit_code == -signal.SIGKILL
    assert "ready" in (tmp_path / "services" / "stubborn" / "service.out").read_text()


def test_a_service_that_exits_before_it_is_ready_fails_the_wait_with_its_log(tmp_path):
    state = StackState.load_or_new(tmp_path)
    start_service(state, stub("dies", "import sys; print('no broker here', file=sys.stderr); sys.exit(3)"))
    with pytest.raises(StackError, match=r"(?s)service dies exited 3 before it was ready.*no broker here"):
        wait_ready(state, "dies", timeout=60)
    assert not is_running(state, state.service("dies"))  # type: ignore[arg-type]


def test_a_running_name_is_not_started_twice_and_stop_services_stops_all(tmp_path):
    state = StackState.load_or_new(tmp_path)
    sleeper = (
        "from ballast.readiness import announce_ready; import time; announce_ready('x'); time.sleep(600)"
    )
    for name in ("a", "b"):
        start_service(state, stub(name, sleeper))
        wait_ready(state, name, timeout=60)
    with pytest.raises(StackError, match="already runs"):
        start_service(state, stub("a", sleeper))
    stop_services(state)
    assert stack_processes(tmp_path) == []
    assert [s.exit_code for s in StackState.load(tmp_path).services] == [-signal.SIGTERM] * 2
