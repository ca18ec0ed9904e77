"""Shared fixtures: a real Kafka broker for the whole session, started with the same code as
``ballast stack up`` on free loopback ports in a temporary folder, plus factories for fresh topic
names and clients (the Quix Streams pattern: uuid topics keep tests independent on one broker).
Tests that need executors share one Spark standalone cluster (``spark_cluster``), started the same
way on first use.

Tests are marked by folder: tests/unit -> ``unit``, tests/integration -> ``integration``,
tests/e2e -> ``e2e``, tests/docker -> ``docker`` (applied in ``pytest_collection_modifyitems``).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ballast.kafka.configuration import KafkaConfig

FOLDER_MARKS = {"unit": "unit", "integration": "integration", "e2e": "e2e", "docker": "docker"}


@pytest.hookimpl(tryfirst=True)  # before pytest's own -m filter, which reads these marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        parts = Path(str(item.fspath)).parts
        for folder, mark in FOLDER_MARKS.items():
            if folder in parts and item.get_closest_marker(mark) is None:
                item.add_marker(getattr(pytest.mark, mark))


@pytest.fixture(scope="session")
def kafka_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """One real single-node KRaft broker for the whole session, stopped at the end."""
    from ballast.devstack.jvm import StackSettings
    from ballast.devstack.stack import start_stack, stop_stack

    state_dir = tmp_path_factory.mktemp("stack")
    state = start_stack(state_dir, brokers=1, settings=StackSettings.from_args())  # BALLAST_BROKER_HEAP …
    try:
        yield state
    finally:
        stop_stack(state_dir)


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """One Spark standalone master and two 1-core workers on loopback for the whole session.

    Started only when a test asks for it (a JVM per daemon is too much to pay for every session),
    with the same code as ``ballast stack up --spark`` but without brokers, and stopped at the end.
    Yields the StackState; its ``spark`` holds the master URL, workers and logs.
    """
    from ballast.devstack.jvm import StackSettings
    from ballast.devstack.spark_cluster import SparkSettings, start_spark_cluster, stop_spark_cluster

    state_dir = tmp_path_factory.mktemp("spark")
    java = StackSettings.from_args().java  # BALLAST_JAVA, BALLAST_SPARK_WORKER_MEMORY …
    state = start_spark_cluster(state_dir, workers=2, settings=SparkSettings.from_args(), java=java)
    try:
        yield state
    finally:
        stop_spark_cluster(state_dir)


@pytest.fixture(scope="session")
def bootstrap(kafka_stack) -> str:
    return kafka_stack.bootstrap


@pytest.fixture(scope="session")
def kafka_config(bootstrap: str) -> KafkaConfig:
    return KafkaConfig.plaintext(bootstrap, "ballast-tests")


@pytest.fixture(scope="session")
def admin(kafka_config: KafkaConfig):
    from ballast.kafka.admin import make_admin

    return make_admin(kafka_config)


@pytest.fixture
def unique() -> Callable[[str], str]:
    """Fresh names for topics, groups and prefixes: ``unique("t")`` -> ``t-1f3a…``."""
    return lambda base: f"{base}-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def topic_factory(admin, unique) -> Callable[..., str]:
    """Create a fresh topic and return its name."""
    from ballast.kafka.admin import ensure_topics
    from ballast.kafka.topics import TopicSpec

    def make(base: str = "t", partitions: int = 1, config: dict[str, str] | None = None) -> str:
        name = unique(base)
        ensure_topics(admin, [TopicSpec("test", name, partitions, config or {})])
        return name

    return make
