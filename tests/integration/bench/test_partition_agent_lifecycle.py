"""The producer agent as a host process: started once by whichever task dials first, gone when
idle, stopped, or its folder removed (so no test and no run leaves one behind)."""

from __future__ import annotations

import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ballast.waiting import wait_until
from bench.reduce import partition_agent_client as client
from tests.support.stage_agent import agent_home


def pid_of(job: str) -> int:
    with client.connect("localhost:9", job) as conn:
        (pid,) = client.request(conn, "ping")
    return int(pid)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"  # our child, exited, not reaped


def test_tasks_dialing_at_once_start_one_agent_which_exits_when_idle(monkeypatch) -> None:
    with agent_home() as folder:
        monkeypatch.setenv("BALLAST_STAGE_AGENT_DIR", str(folder))
        monkeypatch.setenv("BALLAST_STAGE_AGENT_IDLE_S", "2")
        with ThreadPoolExecutor(8) as pool:
            pids = set(pool.map(pid_of, ["job"] * 8))
        assert len(pids) == 1, f"{len(pids)} agents started for one job"
        (pid,) = pids
        wait_until(lambda: not alive(pid), 30, "the idle agent to exit")
        assert not list(folder.glob("*.sock")), "the agent left its socket"
        assert pid_of("job") != pid, "a task after the exit must start a new agent"


def test_an_agent_is_stopped_on_request_and_when_its_folder_goes(monkeypatch) -> None:
    with agent_home() as folder:
        monkeypatch.setenv("BALLAST_STAGE_AGENT_DIR", str(folder))
        first = pid_of("a")
        assert client.stop_agent("localhost:9", "a")
        wait_until(lambda: not alive(first), 30, "the stopped agent to exit")
        assert not client.stop_agent("localhost:9", "a"), "no agent runs: nothing to stop"
        second = pid_of("b")
        shutil.rmtree(folder)
        wait_until(lambda: not alive(second), 30, "the agent whose folder was removed to exit")
