"""The ``ballast`` command as a user runs it: stack up / status / topics / down on a private folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from ballast.devstack.stack import pid_alive


def ballast(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "ballast.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COLUMNS": "300"},  # rich wraps tables to the terminal width
    )
    if check:
        assert done.returncode == 0, f"ballast {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    return done


def test_stack_lifecycle_and_topics(tmp_path):
    state = str(tmp_path / "stack")
    assert "no stack recorded" in ballast("--state-dir", state, "stack", "status", check=False).stdout
    ballast("--state-dir", state, "stack", "up")
    try:
        status = json.loads(ballast("--state-dir", state, "stack", "status", "--json").stdout)
        node = status["nodes"][0]
        assert node["running"] and pid_alive(node["pid"], state)
        # `up` again is a no-op on a running stack: same pid
        ballast("--state-dir", state, "stack", "up")
        again = json.loads(ballast("--state-dir", state, "stack", "status", "--json").stdout)
        assert again["nodes"][0]["pid"] == node["pid"]

        # topics: no address needed, the CLI reads it from the state folder
        first = ballast("--state-dir", state, "topics", "create", "--workers", "4").stdout
        assert "created  ballast.routed" in first
        second = ballast("--state-dir", state, "topics", "create", "--workers", "4").stdout
        assert "exists   ballast.routed" in second and "created" not in second
        clash = ballast("--state-dir", state, "topics", "create", "--workers", "6", check=False)
        assert clash.returncode == 2
        assert "ballast.routed: has 4 partitions, Ballast needs 6" in clash.stdout
    finally:
        ballast("--state-dir", state, "stack", "down")
    assert not pid_alive(node["pid"])
    down_again = ballast("--state-dir", state, "stack", "status", "--json").stdout
    assert json.loads(down_again)["nodes"][0]["running"] is False


def test_topics_list_prints_the_layout():
    out = ballast("topics", "list", "--workers", "5").stdout
    for name in (
        "ballast.input",
        "ballast.routed",
        "ballast.control",
        "ballast.metrics",
        "ballast.output",
        "ballast.dead-letter",
    ):
        assert name in out
