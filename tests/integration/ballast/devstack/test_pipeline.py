"""``ballast stack up --pipeline``: a broker, two routers and the reduce, each its own process,
listed by ``stack status`` with pids and logs; ``stack scale-reduce`` restarts the reduce on a new
core count (the controller's reduce hook in the local stack); ``stack down`` stops everything so
that nothing of the state folder is left, also after the reduce's process group was sent SIGTERM
(as systemd or a terminal does), which stops it cleanly: no Python traceback, no Py4J error."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from ballast.devstack.processes import pid_alive
from ballast.devstack.services import stack_processes
from ballast.waiting import wait_until


def ballast(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BALLAST_")}
    return subprocess.run(
        [sys.executable, "-m", "ballast.cli", *args], capture_output=True, text=True, timeout=timeout, env=env
    )


def folder_processes(state: Path) -> list[int]:
    """Every live process of the folder: a service's (its marker) or one naming the folder."""
    named = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid() and pid_alive(int(entry.name), str(state)):
            named.append(int(entry.name))
    return sorted(set(named) | set(stack_processes(state)))


def test_pipeline_up_status_group_sigterm_and_down_leave_nothing(tmp_path):
    state = tmp_path / "stack"
    up = ballast("stack", "up", "--pipeline", "--routers", "2", "--state-dir", str(state), "--prefix", "pl")
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        status = json.loads(ballast("stack", "status", "--json", "--state-dir", str(state)).stdout)
        services = {s["name"]: s for s in status["services"]}
        assert sorted(services) == ["reduce", "router-1", "router-2"]
        assert [n["running"] for n in status["nodes"]] == [True]
        for s in services.values():
            assert s["running"] and s["ready"] and s["pid"] and Path(s["log"]).is_file(), s
        assert services["router-1"]["kind"] == "router" and services["reduce"]["kind"] == "reduce"
        text = ballast("stack", "status", "--state-dir", str(state)).stdout
        for name, s in services.items():
            assert f"{s['kind']} {name}" in text and str(s["pid"]) in text and s["log"] in text

        # the reduce on 3 cores: the same job restarted from its checkpoint, with 3 local task slots
        assert " --local-cores 2 " in services["reduce"]["command"]
        scaled = ballast("stack", "scale-reduce", "3", "--state-dir", str(state), "--prefix", "pl")
        assert scaled.returncode == 0, scaled.stdout + scaled.stderr
        before = services["reduce"]
        status = json.loads(ballast("stack", "status", "--json", "--state-dir", str(state)).stdout)
        services = {s["name"]: s for s in status["services"]}
        now = services["reduce"]
        assert now["running"] and now["ready"] and now["pid"] != before["pid"]
        assert not pid_alive(before["pid"])
        assert " --local-cores 3 " in now["command"]
        assert now["command"].replace(" --local-cores 3 ", " --local-cores 2 ") == before["command"]

        # the reduce's whole process group gets SIGTERM: it stops its query and Spark, and exits
        reduce = services["reduce"]["pid"]
        os.killpg(reduce, signal.SIGTERM)
        wait_until(lambda: not pid_alive(reduce), 120, "the reduce to exit after a group SIGTERM")
        log = Path(services["reduce"]["log"]).read_text(errors="replace")
        noise = ("Traceback", "Py4J", "does not exist in the JVM")
        assert not [word for word in noise if word in log], log[-3000:]
        after = json.loads(ballast("stack", "status", "--json", "--state-dir", str(state)).stdout)
        assert {s["name"]: s["running"] for s in after["services"]}["reduce"] is False
    finally:
        down = ballast("stack", "down", "--state-dir", str(state))
    assert down.returncode == 0, down.stderr
    assert folder_processes(state) == []
