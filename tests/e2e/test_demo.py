"""`make demo`'s job, end to end on its own embedded stack: it starts a broker, creates the topics,
round-trips Avro records, reports success, and leaves no process behind."""

from __future__ import annotations

import os
import subprocess
import sys

from ballast.localstack import StackState, pid_alive


def test_demo_runs_on_its_own_stack_and_cleans_up(tmp_path):
    state = tmp_path / "demo-stack"
    out = subprocess.run(
        [sys.executable, "-m", "ballast.demo", "--records", "20000", "--state-dir", str(state)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "round trip OK" in out.stdout
    assert "missing 0, duplicated 0" in out.stdout
    pids = [n.pid for n in StackState.load(state).nodes]
    assert pids == [None]  # recorded as stopped
    assert "local stack stopped" in out.stdout
    assert not any(pid_alive(p) for p in pids if p)
