"""The ``ballast`` command as a user runs it: stack up / status / topics / down on a private folder,
``topics list`` against the broker, control events by hand, and one-line errors (acceptance 6)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ballast.devstack.processes import free_port, pid_alive
from ballast.devstack.state import NodeState, StackState
from ballast.paths import DEPLOY_DIR

SAMPLE = DEPLOY_DIR / "sample" / "events.jsonl"

# the tests set what they need; a developer's own BALLAST_* settings must not leak in
ENV = {k: v for k, v in os.environ.items() if not k.startswith("BALLAST_")}


def ballast(*args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "ballast.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=ENV,
    )
    if check:
        assert done.returncode == 0, f"ballast {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    return done


def lines_of(done: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]


def test_stack_lifecycle_and_topics(tmp_path):
    state = str(tmp_path / "stack")
    missing = ballast("stack", "status", "--state-dir", state, check=False)
    assert missing.returncode == 1 and lines_of(missing) == [
        f"error: no stack recorded in {state} (nothing to do; start one with `ballast stack up`)"
    ]
    up = ballast("stack", "up", "--state-dir", state)
    # progress while it starts (stderr), the result on stdout
    for step in (
        "formatting storage of node 1…",
        "starting broker 1 on 127.0.0.1:",
        "waiting for the cluster",
    ):
        assert step in up.stderr, up.stderr
    assert up.stdout.startswith("stack up in ")
    try:
        status = json.loads(ballast("stack", "status", "--json", "--state-dir", state).stdout)
        node = status["nodes"][0]
        assert node["running"] and pid_alive(node["pid"], state)
        # `up` again on a running stack: says so, restarts nothing
        again = ballast("stack", "up", "--state-dir", state)
        assert lines_of(again) == [f"stack already running at 127.0.0.1:{node['port']} (state {state})"]
        status = json.loads(ballast("stack", "status", "--json", "--state-dir", state).stdout)
        assert status["nodes"][0]["pid"] == node["pid"]

        # topics: no address needed, the CLI reads it from the state folder
        first = ballast("topics", "create", "--workers", "4", "--state-dir", state).stdout
        assert "created  ballast.routed" in first
        genesis = "genesis of ballast.control (epoch 0: 4 routed partitions, 4 active workers)"
        assert f"written  {genesis}" in first.splitlines()
        second = ballast("topics", "create", "--workers", "4", "--state-dir", state).stdout
        assert "exists   ballast.routed" in second and "created" not in second
        assert f"exists   {genesis}" in second.splitlines()
        other = ballast(
            "topics", "create", "--workers", "4", "--active-workers", "2", "--state-dir", state, check=False
        )
        assert other.returncode == 2 and lines_of(other)[-1] == (
            "error: control log ballast.control: its genesis (epoch 0: 4 routed partitions, 4 active "
            "workers) contradicts --active-workers 2 (nothing was changed; 0 keeps the recorded value)"
        )
        clash = ballast("topics", "create", "--workers", "6", "--state-dir", state, check=False)
        assert clash.returncode == 2
        assert clash.stderr.startswith("error: existing topics contradict Ballast's layout")
        assert "ballast.routed: has 4 partitions, Ballast needs 6" in clash.stderr
        assert "Traceback" not in clash.stderr
    finally:
        ballast("stack", "down", "--state-dir", state)
    assert not pid_alive(node["pid"])
    down_again = ballast("stack", "status", "--json", "--state-dir", state).stdout
    assert json.loads(down_again)["nodes"][0]["running"] is False
    # a stopped stack: the broker check says which stack to start
    stopped = ballast("topics", "list", "--state-dir", state, check=False)
    assert stopped.returncode == 1
    assert lines_of(stopped) == [
        f"error: no broker at 127.0.0.1:{node['port']}: the stack recorded in {state} is not running — "
        f"start it with `ballast stack up --state-dir {state}` or pass --bootstrap"
    ]


def test_topics_list_planned_needs_no_broker():
    out = ballast("topics", "list", "--planned", "--workers", "5", "--bootstrap", "127.0.0.1:1").stdout
    rows = {line.split()[0]: line.split() for line in out.splitlines()[2:]}
    assert rows["routed"][1:3] == ["ballast.routed", "5"]
    assert rows["dead_letter"][1] == "ballast.dead-letter"
    assert "cleanup.policy=delete" in rows["control"]


def test_topics_list_shows_what_the_broker_has(bootstrap, unique):
    prefix = unique("cli-list")
    conn = ("--bootstrap", bootstrap, "--prefix", prefix)
    before = json.loads(ballast("topics", "list", "--json", *conn).stdout)
    assert {r["status"] for r in before} == {"missing"} and {r["partitions"] for r in before} == {None}

    ballast("topics", "create", "--workers", "3", "--input-partitions", "2", *conn)
    report = json.loads(
        ballast("topics", "list", "--json", "--workers", "3", "--input-partitions", "2", *conn).stdout
    )
    by_role = {r["role"]: r for r in report}
    assert set(by_role) == {
        "input", "routed", "control", "requests", "responses", "metrics", "output", "dead_letter"
    }  # fmt: skip
    requests = by_role["requests"]
    assert (requests["name"], requests["partitions"]) == (f"{prefix}.control-requests", 1)
    assert by_role["routed"]["name"] == f"{prefix}.routed"
    assert (by_role["routed"]["partitions"], by_role["input"]["partitions"]) == (3, 2)
    assert by_role["control"]["config"] == {
        "cleanup.policy": "delete",
        "retention.ms": "-1",
        "retention.bytes": "-1",
    }
    assert {r["status"] for r in report} == {"ok"}

    # expecting 5 workers: the broker's 3 partitions are shown as a conflict, nothing is cut
    wide = ballast("topics", "list", "--workers", "5", "--input-partitions", "2", *conn).stdout
    routed = next(line for line in wide.splitlines() if line.startswith("routed "))
    assert routed.split() == ["routed", f"{prefix}.routed", "5", "3", "-", "conflict"]
    assert f"conflict: {prefix}.routed: has 3 partitions, Ballast needs 5" in wide


def test_control_send_asks_the_controller_and_prints_its_refusal_in_one_line(
    bootstrap, kafka_config, unique, tmp_path
):
    from ballast.harness.pipeline import Pipeline
    from ballast.kafka.topics import TopicLayout

    prefix = unique("cli-control")
    conn = ("--bootstrap", bootstrap, "--prefix", prefix)
    ballast("topics", "create", "--workers", "4", *conn)
    layout = TopicLayout(prefix=prefix, workers=4)
    with Pipeline(kafka_config, layout, tmp_path / "stack", create=False) as pipe:
        pipe.start(pipe.controller("c", rebalance=False))

        bad = ballast("control", "send", "--assign", "k=99", *conn, check=False)
        assert bad.returncode == 2
        refusal = "error: refused (worker-out-of-range): key 'k' -> worker 99; workers are 0..3"
        assert lines_of(bad) == [refusal]
        not_a_number = ballast("control", "send", "--assign", "k=x", *conn, check=False)
        assert not_a_number.returncode == 2
        assert lines_of(not_a_number) == [
            "error: --assign: expected KEY=WORKER with an integer WORKER, got 'k=x'"
        ]

        good = ballast("control", "send", "--assign", "k=3", "--reason", "hot", *conn)
        assert json.loads(good.stdout)["epoch"] == 1 and lines_of(good) == [good.stdout.strip()]
    shown = [json.loads(line) for line in ballast("control", "show", *conn).stdout.splitlines()]
    genesis, update, folded = shown
    assert (genesis["epoch"], genesis["type"], genesis["payload"]["routed_partitions"]) == (
        0,
        "TABLE_SNAPSHOT",
        4,
    )
    assert update["payload"]["assign"] == {"k": 3}
    assert (folded["epoch"], folded["num_workers"], folded["table_size"]) == (1, 4, 1)


def test_control_commands_refuse_a_log_without_genesis(bootstrap, admin, unique):
    from ballast.kafka.admin import ensure_topics
    from ballast.kafka.topics import TopicLayout

    prefix = unique("cli-nogen")
    ensure_topics(admin, TopicLayout(prefix=prefix, workers=4).specs())  # by hand: no genesis
    conn = ("--bootstrap", bootstrap, "--prefix", prefix)
    no_genesis = (
        f"error: control log {prefix}.control has no genesis (the TABLE_SNAPSHOT that records epoch 0): "
        "run `ballast topics create` to write it"
    )
    controller = ["controller", "run", "--controller-id", "c", "--log-level", "warning"]
    for command in (["control", "show"], controller):
        done = ballast(*command, *conn, check=False, timeout=120)
        assert done.returncode == 1 and lines_of(done) == [no_genesis], done.stdout + done.stderr
    # with no controller (none can run on this log), a request says so within its time-out
    unanswered = ballast("control", "send", "--scale", "2", "--timeout", "3", *conn, check=False)
    assert unanswered.returncode == 1 and len(lines_of(unanswered)) == 1
    assert "no controller" in lines_of(unanswered)[0]


NO_BROKER_COMMANDS = {
    "topics create": ["topics", "create", "--state-dir", "{tmp}"],
    "topics list": ["topics", "list", "--state-dir", "{tmp}"],
    "control show": ["control", "show", "--state-dir", "{tmp}"],
    "control send": ["control", "send", "--assign", "k=1", "--state-dir", "{tmp}"],
    "controller run": ["controller", "run", "--controller-id", "c", "--state-dir", "{tmp}"],
    "connect load": ["connect", "load", str(SAMPLE), "--url", "http://127.0.0.1:1", "--state-dir", "{tmp}"],
    "router run": ["router", "run"],
}


@pytest.mark.parametrize("command", NO_BROKER_COMMANDS.values(), ids=NO_BROKER_COMMANDS.keys())
def test_no_broker_is_one_line_and_an_error_exit(command, tmp_path):
    # how soon it gives up is the broker probe's timeout (5 s, require_broker), a parameter, not a
    # measurement; a command that waited for a broker for ever fails here at the 60 s time-out
    address = f"127.0.0.1:{free_port()}"
    argv = [a.format(tmp=tmp_path) for a in command]
    done = ballast(*argv, "--bootstrap", address, check=False, timeout=60)
    assert done.returncode != 0
    # one line, no librdkafka chatter, no traceback
    lines = lines_of(done)
    assert len(lines) == 1, done.stdout + done.stderr
    assert lines[0].startswith(f"error: no broker at {address} — start one with `ballast stack up`"), lines


def test_debug_shows_the_traceback(tmp_path):
    # a recorded stack whose broker port nothing listens on
    node = NodeState(1, free_port(), free_port(), str(tmp_path), str(tmp_path), str(tmp_path / "log"))
    StackState(str(tmp_path), "cid", [node]).save()
    quiet = ballast("topics", "list", "--state-dir", str(tmp_path), check=False)
    loud = ballast("--debug", "topics", "list", "--state-dir", str(tmp_path), check=False)
    assert quiet.returncode == loud.returncode == 1
    assert "Traceback" not in quiet.stderr and "Traceback (most recent call last)" in loud.stderr
    assert "BrokerUnreachable" in loud.stderr
