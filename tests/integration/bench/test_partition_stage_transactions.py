"""The partition stage's exactly-once task against a real broker and its host's producer agent:
crashes before and after the commit, the agent killed, a new host with no state file, a zombie
attempt, another host taking a partition. Judged by a read_committed read of the output against a
pandas reference of the same records (no Spark: the task is a plain function)."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from ballast.kafka.configuration import KafkaConfig
from bench.reduce import partition_agent_client, partition_exactly_once, partition_store
from bench.reduce.partition_agent import ProducerAgent, _confluent_producer
from bench.reduce.partition_agent_client import AgentError, agent_paths, request
from bench.reduce.partition_stage import CHANGELOG_CONFIG
from bench.reduce.partition_task import TaskConfig, run_task
from tests.support.stage_agent import agent_home, serve_in_process
from tests.support.stage_windows import assert_each_window_once, committed_windows, window_reference

WINDOW_MS = 10_000
KEYS = [f"k{i}" for i in range(40)]


def batch_records(batch: int, partition: int = 0, n: int = 400) -> pa.RecordBatch:
    """Batch ``batch``'s records: event times inside window ``batch``, so watermark ``batch * W``
    closes every earlier batch's windows and no record is late."""
    rng = np.random.default_rng(1000 * batch + partition)
    return pa.RecordBatch.from_pydict(
        {
            "partition": pa.array(np.full(n, partition, dtype=np.int32)),
            "key": pa.array(rng.choice(KEYS, n)),
            "value": pa.array(rng.integers(0, 100, n).astype(np.float64)),
            "t": pa.array(batch * WINDOW_MS + rng.integers(0, WINDOW_MS, n)),
        }
    )


def reference(batches: range, partition: int = 0) -> pd.DataFrame:
    frame = pa.Table.from_batches([batch_records(b, partition) for b in batches]).to_pandas()
    return window_reference(frame, WINDOW_MS)


def run(cfg: TaskConfig, batch: int, partition: int = 0) -> dict:
    """Batch ``batch`` of one partition through the task (watermark ``batch * W``): its stats row."""
    out = list(run_task(cfg, batch, batch * WINDOW_MS, iter([batch_records(batch, partition)])))
    assert len(out) == 1, "an exactly-once task gives the driver its stats row only"
    return out[0].to_pylist()[0]


def assert_exactly_once(kafka: KafkaConfig, cfg: TaskConfig, closed: range, partition: int = 0) -> None:
    got = committed_windows(kafka, cfg.output_topic, cfg.job)
    assert_each_window_once(got, reference(closed, partition))


@pytest.fixture
def fresh_process() -> Iterator[Callable[[], None]]:
    """Forget this process's cached states, as a new Spark Python worker would."""
    partition_store._CACHE.clear()
    yield partition_store._CACHE.clear
    partition_store._CACHE.clear()


@pytest.fixture
def host(monkeypatch) -> Iterator[Callable[[str], None]]:
    """Which simulated host the next task runs on: each has its own agent folder (so its own agent);
    every agent is stopped after the test."""
    with agent_home() as a, agent_home() as b:
        homes = {"a": a, "b": b}

        def on(name: str) -> None:
            monkeypatch.setenv("BALLAST_STAGE_AGENT_DIR", str(homes[name]))
            partition_store._CACHE.clear()

        on("a")
        yield on


def agent_pid(cfg: TaskConfig) -> int:
    conn = partition_agent_client.connect(cfg.kafka.bootstrap_servers, cfg.job)
    with conn:
        (pid,) = request(conn, "ping")
    return int(pid)


@pytest.fixture
def cfg(kafka_config: KafkaConfig, topic_factory, unique, tmp_path: Path) -> TaskConfig:
    changelog = topic_factory("changelog", partitions=2, config=CHANGELOG_CONFIG)
    output = topic_factory("output", partitions=1)
    return TaskConfig(
        str(tmp_path / "host-a"), WINDOW_MS, kafka_config, changelog, output, unique("job"), True
    )


def test_a_batch_rerun_after_its_commit_writes_nothing_again(
    cfg, kafka_config, host, fresh_process, monkeypatch
) -> None:
    for b in range(2):
        run(cfg, b)
    real_save = partition_store.save

    def crash(*_a, **_k) -> None:
        raise RuntimeError("killed between the commit and the state file")

    monkeypatch.setattr(partition_store, "save", crash)
    with pytest.raises(RuntimeError, match="killed"):
        run(cfg, 2)  # committed: batch 1's windows are out, the file still says batch 1
    monkeypatch.setattr(partition_store, "save", real_save)
    rerun = run(cfg, 2)  # Spark's retry, in the same Python worker
    assert rerun["restored"] and rerun["changelog"] == 0, {k: rerun[k] for k in ("restored", "changelog")}
    run(cfg, 3)
    assert_exactly_once(kafka_config, cfg, range(3))


class DiesBeforeCommit:
    """A producer whose process dies inside its transaction: the records reached the broker, no
    commit, no abort."""

    def __init__(self, config: dict) -> None:
        self.producer = _confluent_producer(config)

    def __getattr__(self, name: str):
        return getattr(self.producer, name)

    def commit_transaction(self, timeout: float) -> None:
        self.producer.flush(timeout)
        raise RuntimeError("killed -9 before the commit")


def test_an_agent_that_died_inside_a_transaction_is_aborted_by_the_next(
    cfg, kafka_config, host, fresh_process
) -> None:
    run(cfg, 0)  # an agent process holds the partition's producer
    os.kill(agent_pid(cfg), signal.SIGKILL)
    paths = agent_paths(cfg.kafka.bootstrap_servers, cfg.job)
    dying = serve_in_process(paths, ProducerAgent(DiesBeforeCommit))
    with pytest.raises(AgentError, match="killed -9 before the commit"):
        run(cfg, 1)
    dying.stop()  # its producer is left inside its transaction, as a killed process leaves it
    second = run(cfg, 1)  # the retry starts a new agent, whose producer fences and aborts
    assert second["restored"], "a new agent's producer trusted a file another producer wrote"
    run(cfg, 2)
    assert_exactly_once(kafka_config, cfg, range(2))
    # the dead attempt's windows are in the log, aborted: a read_uncommitted reader sees them twice
    dirty = kafka_config.with_overrides(**{"isolation.level": "read_uncommitted"})
    seen = committed_windows(dirty, cfg.output_topic, cfg.job)
    assert seen.duplicated(["key", "window_start"]).any(), (
        "the aborted attempt left no records: the test proves nothing"
    )


def test_the_agent_keeps_a_partitions_producer_across_python_workers(cfg, kafka_config, host, fresh_process):
    first = run(cfg, 0)
    pid = agent_pid(cfg)
    fresh_process()  # the next task runs in another Python worker
    second = run(cfg, 1)
    assert not second["restored"], "a partition that changed Python worker was rebuilt: the agent lost it"
    assert json_phases(second).get("init", 0) == 0 < json_phases(first)["init"]
    assert agent_pid(cfg) == pid
    os.kill(pid, signal.SIGKILL)  # kill -9 of the agent: the next task starts one, and rebuilds
    third = run(cfg, 2)
    assert third["restored"] and agent_pid(cfg) != pid
    run(cfg, 3)
    assert_exactly_once(kafka_config, cfg, range(3))


def json_phases(stats: dict) -> dict:
    return json.loads(stats["phase_ms"])


def test_a_new_host_rebuilds_the_partition_from_the_changelog(cfg, kafka_config, host, fresh_process) -> None:
    for b in range(3):
        run(cfg, b, partition=1)
    kept = partition_store.load(cfg.state_dir, 1)
    host("b")
    host_b = dataclasses.replace(cfg, state_dir=str(Path(cfg.state_dir).parent / "host-b"))
    state, session, how = partition_exactly_once.start_state(host_b, 1)
    session.close()
    assert how == "restored"
    assert (state.batch_id, state.max_event_ms, state.late_total) == (
        kept.batch_id,
        kept.max_event_ms,
        kept.late_total,
    )
    pd.testing.assert_frame_equal(state.table.sort_index(), kept.table.sort_index(), check_dtype=False)
    again = run(host_b, 2, partition=1)  # the batch host A committed: nothing written again
    assert again["changelog"] == 0
    run(host_b, 3, partition=1)
    run(host_b, 4, partition=1)
    assert_exactly_once(kafka_config, host_b, range(4), partition=1)


def test_a_zombie_attempt_is_refused_by_the_agent(cfg, kafka_config, host, fresh_process) -> None:
    run(cfg, 0)
    zombie = partition_exactly_once.open_session(cfg, 0)  # an attempt Spark gave up on, still running
    run(cfg, 1)  # the retry opens a newer generation and commits
    with pytest.raises(AgentError, match="Fenced"):
        zombie.commit([(cfg.changelog_topic, 0, [(b"k\x000", None)])])
    zombie.close()
    run(cfg, 2)
    assert_exactly_once(kafka_config, cfg, range(2))


def test_a_host_whose_producer_was_fenced_rebuilds_and_retries(cfg, kafka_config, host, fresh_process):
    run(cfg, 0)  # host A's agent holds the producer, and its file
    host("b")
    host_b = dataclasses.replace(cfg, state_dir=str(Path(cfg.state_dir).parent / "host-b"))
    assert run(host_b, 1)["restored"]  # host B's producer fences host A's
    host("a")  # the partition comes back: host A's agent still holds its fenced producer
    with pytest.raises(AgentError, match=r"(?i)fenc"):
        run(cfg, 2)  # its file is not trusted (the changelog moved); its commit is refused by Kafka
    retry = run(cfg, 2)  # the agent dropped the fenced producer: a new one, which fences host B's
    assert retry["restored"]
    run(cfg, 3)
    assert_exactly_once(kafka_config, cfg, range(3))
