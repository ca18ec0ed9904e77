"""Acceptance 1 (Connect): a Kafka Connect worker in distributed mode, started by the same code as
``ballast stack up --connect``, loads the shipped sample file with FileStreamSource; every line of
the file is found in the input topic."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter

from ballast.devstack.connect import connector_status, delete_connector
from ballast.devstack.stack import StackState, start_connect, stop_pid
from ballast.kafka.clients import make_consumer
from ballast.kafka.reading import read_until_idle
from ballast.paths import DEPLOY_DIR

SAMPLE = DEPLOY_DIR / "sample" / "events.jsonl"


def test_file_source_loads_every_line(kafka_stack, kafka_config, topic_factory, unique):
    topic = topic_factory("connect-input", partitions=2)
    state = StackState.load(kafka_stack.state_dir)
    cs = start_connect(state)
    try:
        name = unique("file-source")
        # through the CLI, as the README tells users: it finds the worker in the stack's state folder
        subprocess.run(
            [
                sys.executable,
                "-m",
                "ballast.cli",
                "--state-dir",
                state.state_dir,
                "connect",
                "load",
                str(SAMPLE),
                "--topic",
                topic,
                "--name",
                name,
            ],
            check=True,
            timeout=120,
        )
        assert connector_status(cs.url, name)["connector"]["state"] == "RUNNING"
        lines = SAMPLE.read_text().splitlines()
        consumer = make_consumer(kafka_config, unique("g"))
        consumer.subscribe([topic])
        msgs = read_until_idle(consumer, len(lines), idle=None, timeout=120)
        msgs += read_until_idle(consumer, 1, idle=None, timeout=3)  # nothing extra behind them
        consumer.close()
        delete_connector(cs.url, name)
    finally:
        stop_pid(cs.pid, state.state_dir)
    assert Counter(m.value().decode() for m in msgs) == Counter(lines)
