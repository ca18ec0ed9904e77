"""`make demo`'s job, end to end on its own embedded stack: a broker, the router (exactly-once), a
routing update planned from the router's own metrics and appended to the control log, and a check
of the routed topic against the records the demo produced. It must leave no process behind."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from ballast.devstack.stack import StackState, pid_alive


def test_demo_routes_exactly_once_and_rebalances(tmp_path):
    state = tmp_path / "demo-stack"
    out = subprocess.run(
        [sys.executable, "-m", "services.demo.run", "--records", "40000", "--state-dir", str(state)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "demo OK: every record routed exactly once" in out.stdout
    assert "missing 0, duplicated 0" in out.stdout
    assert re.search(r"control log epoch 1: ROUTING_UPDATE pins \d+ keys", out.stdout)
    # the max/mean row: epoch 0 (hash) then epoch 1 (Mixed); the table must have helped
    row = next(line for line in out.stdout.splitlines() if "max/mean" in line)
    hash_ratio, mixed_ratio = (float(x) for x in re.findall(r"\d+\.\d+", row))
    assert mixed_ratio < hash_ratio, row

    pids = [n.pid for n in StackState.load(state).nodes]
    assert pids == [None]  # recorded as stopped
    assert "local stack stopped" in out.stdout
    assert not any(pid_alive(p) for p in pids if p)
