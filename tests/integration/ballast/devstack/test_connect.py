"""Acceptance 1 (Connect): a Kafka Connect worker in distributed mode, started by the same code as
``ballast stack up --connect``, loads the shipped sample file with FileStreamSource; every line of
the file is found in the input topic, and ``ballast connect load --wait`` reports the count."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter

from ballast.devstack.connect import connector_status, delete_connector
from ballast.devstack.connect_worker import start_connect
from ballast.devstack.processes import stop_pid
from ballast.devstack.state import StackState
from ballast.kafka.admin import ensure_topics
from ballast.kafka.clients import make_consumer
from ballast.kafka.reading import read_until_idle
from ballast.kafka.topics import TopicLayout
from ballast.paths import DEPLOY_DIR

SAMPLE = DEPLOY_DIR / "sample" / "events.jsonl"


def load(state_dir: str, prefix: str, name: str) -> str:
    # through the CLI, as the README tells users: it finds the worker in the stack's state folder
    where = ("--state-dir", state_dir, "--prefix", prefix, "--name", name)
    done = subprocess.run(
        [sys.executable, "-m", "ballast.cli", "connect", "load", str(SAMPLE), "--wait", *where],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.strip()


def test_file_source_loads_every_line(kafka_stack, kafka_config, admin, unique):
    prefix = unique("connect")
    topic = TopicLayout(prefix=prefix, input_partitions=2).name("input")
    ensure_topics(admin, [TopicLayout(prefix=prefix, input_partitions=2).specs()["input"]])
    state = StackState.load(kafka_stack.state_dir)
    cs = start_connect(state)
    try:
        name = unique("file-source")
        lines = SAMPLE.read_text().splitlines()
        out = load(state.state_dir, prefix, name)
        assert (
            out
            == f"connector {name}: {len(lines)} records loaded into {topic} ({len(lines)} lines of {SAMPLE})"
        )
        assert connector_status(cs.url, name)["connector"]["state"] == "RUNNING"
        consumer = make_consumer(kafka_config, unique("g"))
        consumer.subscribe([topic])
        msgs = read_until_idle(consumer, len(lines), idle=None, timeout=120)
        msgs += read_until_idle(consumer, 1, idle=None, timeout=3)  # nothing extra behind them
        consumer.close()
        # the same connector again: Connect resumes at its stored position, so nothing is re-read
        again = load(state.state_dir, prefix, name)
        assert again.startswith(f"connector {name} has already loaded every line of {SAMPLE}")
        delete_connector(cs.url, name)
    finally:
        stop_pid(cs.pid, state.state_dir)
    assert Counter(m.value().decode() for m in msgs) == Counter(lines)
