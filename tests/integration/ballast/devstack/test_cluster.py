"""Acceptance 2: ``ballast stack up --brokers 3`` forms a cluster (replication 3, min ISR 2); a producer
with acks=all keeps producing while one broker is stopped, and a consumer reads every record."""

from __future__ import annotations

import subprocess
import sys

import pytest
from confluent_kafka import Producer

from ballast.devstack.brokers import stop_node
from ballast.devstack.processes import pid_alive
from ballast.devstack.stack import stop_stack
from ballast.devstack.state import StackState
from ballast.kafka.admin import ensure_topics, make_admin
from ballast.kafka.clients import DeliveryTracker, make_consumer, produce_waiting
from ballast.kafka.configuration import KafkaConfig
from ballast.kafka.reading import read_until_idle
from ballast.kafka.topics import TopicSpec
from ballast.waiting import wait_until

PER_PHASE = 20_000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    state_dir = tmp_path_factory.mktemp("cluster")
    # through the real CLI, as a user would
    subprocess.run(
        [sys.executable, "-m", "ballast.cli", "stack", "up", "--brokers", "3", "--state-dir", str(state_dir)],
        check=True,
        timeout=300,
    )
    try:
        yield StackState.load(state_dir)
    finally:
        stop_stack(state_dir)


def _produce(producer: Producer, topic: str, start: int, n: int, tracker: DeliveryTracker) -> None:
    for i in range(start, start + n):
        produce_waiting(producer, topic, str(i).encode(), str(i % 97).encode(), tracker)
        if i % 2000 == 0:
            producer.poll(0)


def test_three_brokers_survive_one_stopped(cluster, unique):
    cfg = KafkaConfig.plaintext(cluster.bootstrap, "cluster-test")
    admin = make_admin(cfg)
    md = admin.list_topics(timeout=10)
    assert sorted(md.brokers) == [1, 2, 3]

    topic = unique("replicated")
    ensure_topics(admin, [TopicSpec("test", topic, 6, {})])  # broker defaults: RF 3, min ISR 2
    # metadata reaches the three brokers at slightly different times: ask until all 6 partitions show
    def replicas() -> dict[int, int]:
        partitions = admin.list_topics(topic, timeout=10).topics[topic].partitions
        return {p.id: len(p.replicas) for p in partitions.values()}

    # each call may be answered by another broker, which can still lag: judge one answer whole
    seen: dict[int, int] = {}

    def settled() -> bool:
        seen.clear()
        seen.update(replicas())
        return len(seen) == 6 and set(seen.values()) == {3}

    wait_until(
        settled, 30, f"6 partitions of {topic} with 3 replicas each", describe=lambda: f"replicas {seen}"
    )

    tracker = DeliveryTracker()
    producer = Producer(cfg.producer(acks="all", **{"message.timeout.ms": 120_000}))
    _produce(producer, topic, 0, PER_PHASE, tracker)
    assert producer.flush(60) == 0

    stop_node(cluster, 2)  # a broker (and controller voter) goes away mid-stream
    _produce(producer, topic, PER_PHASE, PER_PHASE, tracker)
    assert producer.flush(120) == 0
    tracker.raise_if_failed()
    assert tracker.delivered == 2 * PER_PHASE
    # the stopped broker leaves the metadata once it is fenced
    wait_until(lambda: sorted(admin.list_topics(timeout=10).brokers) == [1, 3], 30, "broker 2 to leave")

    consumer = make_consumer(cfg, unique("g"))
    consumer.subscribe([topic])
    msgs = read_until_idle(consumer, 2 * PER_PHASE, idle=None, timeout=180)
    msgs += read_until_idle(consumer, 1, idle=None, timeout=3)
    consumer.close()
    values = sorted(int(m.value()) for m in msgs)
    assert values == list(range(2 * PER_PHASE)), f"got {len(values)} records"


def _stack(*args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "ballast.cli", "stack", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)


def test_a_broker_killed_and_started_again_through_the_cli(cluster, unique):
    """``ballast stack kill-broker N`` kills the recorded pid (kill -9), ``start-broker N`` brings the
    node back on its data; writes with acks=all go on meanwhile and nothing is lost."""
    folder = cluster.state_dir
    cfg = KafkaConfig.plaintext(cluster.bootstrap, "cluster-cli-test")
    admin = make_admin(cfg)
    started = _stack("start-broker", "2", "--state-dir", folder)  # stopped by the test above, if it ran
    assert started.returncode == 0, started.stderr
    assert sorted(admin.list_topics(timeout=10).brokers) == [1, 2, 3]
    assert _stack("kill-broker", "7", "--state-dir", folder).returncode == 2  # no such broker: one line

    pid = StackState.load(folder).node(3).pid
    killed = _stack("kill-broker", "3", "--state-dir", folder)
    assert killed.returncode == 0 and f"pid {pid}" in killed.stdout, killed.stderr
    assert not pid_alive(pid) and StackState.load(folder).node(3).pid is None
    wait_until(lambda: sorted(admin.list_topics(timeout=10).brokers) == [1, 2], 60, "broker 3 to leave")
    topic = unique("killed")
    ensure_topics(admin, [TopicSpec("test", topic, 3, {})])
    tracker = DeliveryTracker()
    producer = Producer(cfg.producer(acks="all", **{"message.timeout.ms": 120_000}))
    _produce(producer, topic, 0, 2_000, tracker)
    assert producer.flush(120) == 0

    again = _stack("start-broker", "3", "--state-dir", folder)
    assert again.returncode == 0, again.stderr
    assert pid_alive(StackState.load(folder).node(3).pid, folder)
    _produce(producer, topic, 2_000, 2_000, tracker)
    assert producer.flush(120) == 0
    tracker.raise_if_failed()
    assert tracker.delivered == 4_000
    assert sorted(admin.list_topics(timeout=10).brokers) == [1, 2, 3]
