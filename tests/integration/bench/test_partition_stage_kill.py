"""The exactly-once partition stage under ``kill -9``, in real Spark: the query is killed twice
mid-run (the second time its host's producer agent is killed and its state files are wiped too, as
on a new host) and restarted from its checkpoint; a read_committed read of the output must hold
every closed window exactly once, equal to a pandas reference of the same records."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ballast.avro.wire import DATA_PREFIX, data_suffix, encode_input_body, zigzag
from ballast.cli.connection import ConnectionSettings
from ballast.kafka.configuration import KafkaConfig
from ballast.waiting import wait_until
from bench.reduce import partition_agent_client
from tests.support.stage_agent import agent_home
from tests.support.stage_windows import assert_each_window_once, committed_windows, window_reference

ROOT = Path(__file__).resolve().parents[3]
PARTITIONS = 4
PER_PARTITION = 3_000
WINDOW_MS = 2_000
STEP_MS = 5  # event time between a partition's records: 15 s of event time, 7 windows
START_MS = 1_700_000_000_000
KEYS = 30


def events() -> pd.DataFrame:
    rng = np.random.default_rng(30)
    frames = []
    for p in range(PARTITIONS):
        n = PER_PARTITION
        frames.append(
            pd.DataFrame(
                {
                    "partition": p,
                    "key": [f"p{p}-k{i}" for i in rng.integers(0, KEYS, n)],
                    "value": rng.integers(0, 1000, n).astype(np.float64),
                    "t": START_MS + np.arange(n) * STEP_MS + rng.integers(0, 40, n),  # a little disorder
                }
            )
        )
    return pd.concat(frames, ignore_index=True)


def produce(kafka: KafkaConfig, topic: str, frame: pd.DataFrame) -> None:
    from confluent_kafka import Producer

    producer = Producer(kafka.producer())
    suffix = data_suffix(0, "test-router", "test-input", 0)
    for i, r in enumerate(frame.itertuples(index=False)):
        body = encode_input_body(r.key, float(r.value), b"", int(r.t))
        producer.produce(
            topic, DATA_PREFIX + body + suffix + zigzag(i), r.key.encode(), partition=int(r.partition)
        )
        if i % 5_000 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0


def stage_rows(log: Path) -> list[dict]:
    rows = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return [r for r in rows if "batch" in r]


class Stage:
    """The stage's process, in a session of its own (so ``kill -9`` takes its JVM too)."""

    def __init__(self, kafka: KafkaConfig, folder: Path, routed: str, output: str, job: str) -> None:
        self.folder, self.log = folder, folder / "stage.jsonl"
        self.argv = [
            sys.executable, "-m", "bench.reduce.partition_stage",
            *ConnectionSettings.of(kafka, folder).to_argv(),
            "--topic", routed, "--output-topic", output, "--job", job, "--exactly-once",
            "--changelog-topic", f"{routed}-changelog", "--stage-state-dir", str(folder / "state"),
            "--stage-log", str(self.log), "--checkpoint", str(folder / "checkpoint"),
            "--window", f"{WINDOW_MS} milliseconds", "--watermark-delay", "1 second",
            "--trigger", "300 milliseconds", "--max-offsets-per-trigger", "1500",
            "--local-cores", "2", "--partitions", str(PARTITIONS), "--spark-log", str(folder / "spark.log"),
        ]  # fmt: skip
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        env = os.environ | {"PYTHONPATH": str(ROOT)}  # BALLAST_STAGE_AGENT_DIR: the test's
        err = open(self.folder / "stage.err", "ab")  # noqa: SIM115 - the child holds it
        self.proc = subprocess.Popen(
            self.argv, cwd=ROOT, env=env, stdout=err, stderr=err, start_new_session=True
        )

    def batches(self) -> int:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(
                f"the stage exited {self.proc.returncode}: {(self.folder / 'stage.err').read_text()[-3000:]}"
            )
        return len(stage_rows(self.log))

    def kill(self) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture
def agent_dir(monkeypatch) -> Iterator[Path]:
    with agent_home() as folder:
        monkeypatch.setenv("BALLAST_STAGE_AGENT_DIR", str(folder))
        yield folder


def kill_agent(kafka: KafkaConfig, job: str) -> None:
    conn = partition_agent_client.connect(kafka.bootstrap_servers, job)
    with conn:
        (pid,) = partition_agent_client.request(conn, "ping")
    os.kill(pid, signal.SIGKILL)


def test_every_window_is_committed_exactly_once_across_two_kills(
    kafka_config, topic_factory, unique, tmp_path, agent_dir
) -> None:
    frame = events()
    routed = topic_factory("routed", partitions=PARTITIONS)
    output = topic_factory("output", partitions=1)
    produce(kafka_config, routed, frame)
    job = unique("stage")
    stage = Stage(kafka_config, tmp_path, routed, output, job)
    last_t = int(frame["t"].max())
    try:
        stage.start()
        wait_until(lambda: stage.batches() >= 2, 180, "two batches before the first kill")
        time.sleep(0.15)  # into the next batch's tasks
        stage.kill()
        stage.start()
        done = len(stage_rows(stage.log))
        wait_until(lambda: stage.batches() >= done + 2, 180, "two batches after the restart")
        time.sleep(0.15)
        stage.kill()
        kill_agent(kafka_config, job)  # a new host: no producer agent, no state files, only the changelog
        shutil.rmtree(tmp_path / "state")
        stage.start()
        wait_until(
            lambda: stage.batches() and stage_rows(stage.log)[-1]["max_seen_ms"] >= last_t, 240, "the end"
        )
    finally:
        stage.stop()
    rows = stage_rows(stage.log)
    restarts_restored = sum(r.get("restored", 0) for r in rows)
    assert restarts_restored >= PARTITIONS, (
        f"no partition was rebuilt from the changelog ({restarts_restored})"
    )
    watermark = rows[-1]["watermark_ms"]

    expected = window_reference(frame, WINDOW_MS)
    expected = expected[expected.index.get_level_values("window_start") + WINDOW_MS <= watermark]
    assert len(expected) >= PARTITIONS * KEYS * 4, f"only {len(expected)} windows closed: the check is thin"
    assert_each_window_once(committed_windows(kafka_config, output, job), expected)
