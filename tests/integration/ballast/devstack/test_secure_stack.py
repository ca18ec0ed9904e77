"""``ballast stack up --secure`` from the command line, and ``ballast acls`` on open and secured brokers.

The secured stack: a router started by ``--pipeline`` runs as ``User:router`` under the prefix's
ACLs (it would exit on an authorization error), ``acls check`` finds the set complete, commands
given ``--state-dir`` work as the stack's admin, and a client of the old, open kind cannot talk to
it. On the session's open broker, ``acls check`` says nothing is enforced and lists the whole set.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

from ballast.deployment.acls import Principals, deployment_acls
from ballast.kafka.topics import TopicLayout


def ballast(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BALLAST_")}
    return subprocess.run(
        [sys.executable, "-m", "ballast.cli", *args], capture_output=True, text=True, timeout=timeout, env=env
    )


def test_acls_check_on_an_open_cluster_lists_the_whole_set(kafka_stack) -> None:
    if kafka_stack.security is not None:  # a --secure-stack session: the secured test covers it
        return
    done = ballast("acls", "check", "--bootstrap", kafka_stack.bootstrap, "--prefix", "open", "--json")
    assert done.returncode == 1, done.stderr
    found = json.loads(done.stdout)
    wanted = deployment_acls(TopicLayout(prefix="open"), Principals())
    assert not found["authorizer"] and not found["complete"] and "no authorizer" in found["problem"]
    assert len(found["missing"]) == len(wanted)
    applied = ballast("acls", "apply", "--bootstrap", kafka_stack.bootstrap, "--prefix", "open")
    assert applied.returncode == 1, applied.stdout
    assert "no authorizer" in applied.stderr and "nothing applied" in applied.stderr


def test_secure_stack_up_runs_a_router_as_its_own_user_under_the_acls(tmp_path: Path) -> None:
    state = tmp_path / "stack"
    up = ballast(
        "stack", "up", "--secure", "--pipeline", "--routers", "1", "--no-reduce",
        "--state-dir", str(state), "--prefix", "sp",
    )  # fmt: skip
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        assert "ACLs of prefix 'sp'" in up.stderr
        security = state / "security"
        assert stat.S_IMODE(security.stat().st_mode) == 0o700
        check = ballast("acls", "check", "--state-dir", str(state), "--prefix", "sp")
        assert check.returncode == 0 and check.stdout.startswith("complete"), check.stdout + check.stderr
        other = ballast("acls", "check", "--state-dir", str(state), "--prefix", "elsewhere")
        assert other.returncode == 1 and "incomplete" in other.stdout
        status = ballast("stack", "status", "--state-dir", str(state), "--json")
        services = json.loads(status.stdout)["services"]
        assert [s["running"] for s in services if s["kind"] == "router"] == [True], services
        log = Path(next(s["log"] for s in services if s["kind"] == "router")).read_text()
        assert "AUTHORIZATION" not in log.upper(), log[-2000:]
        router = json.loads((state / "stack.json").read_text())["services"][0]
        assert "password" not in " ".join(router["argv"]).lower()  # handed over by file, not flag
        # an open client gets nowhere on the SASL_SSL listener
        bootstrap = json.loads(status.stdout)["bootstrap"]
        plain = ballast("topics", "list", "--bootstrap", bootstrap, "--prefix", "sp", timeout=60)
        assert plain.returncode != 0
    finally:
        down = ballast("stack", "down", "--state-dir", str(state), "--purge")
        assert down.returncode == 0, down.stderr
