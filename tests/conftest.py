"""Shared fixtures: a real Kafka broker for the whole session, started with the same code as
``ballast stack up`` on free loopback ports in a temporary folder, plus factories for fresh topic
names and clients (the Quix Streams pattern: uuid topics keep tests independent on one broker).
Tests that need executors share one Spark standalone cluster (``spark_cluster``), started the same
way on first use.

``--secure-stack`` (or ``BALLAST_TEST_SECURE_STACK=1``) runs the session's broker as ``ballast stack
up --secure`` does (SASL_SSL, SCRAM users, ACLs enforced); ``kafka_config`` is then its admin (a
super-user), so tests that build their clients from it run unchanged. Tests of the secured
pipeline use ``secure_stack``: that same broker, or one of their own when the session's is open.

Tests are marked by folder: tests/unit -> ``unit``, tests/integration -> ``integration``,
tests/e2e -> ``e2e``, tests/docker -> ``docker`` (applied in ``pytest_collection_modifyitems``).

``make test`` runs the suite on two xdist workers (``TEST_WORKERS``, 0 for one process); which
worker takes which module is tests/support/lanes.py's.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ballast.kafka.configuration import KafkaConfig

FOLDER_MARKS = {"unit": "unit", "integration": "integration", "e2e": "e2e", "docker": "docker"}
SECURE_ENV = "BALLAST_TEST_SECURE_STACK"
# Every JVM the tests start (brokers, Connect, Spark's driver, executors and daemons) compiles with C1
# only: they live for seconds to minutes, and C2's compiler threads cost more CPU than they give back
# in that time (the secured pipeline's test: 110 to 69 CPU-s; the lagging-router one 168 to 131, its
# paced input read as fast). Products and benchmarks keep the JVM's default. A JAVA_TOOL_OPTIONS the
# caller set wins; BALLAST_TEST_JVM_OPTIONS= (empty) turns it off.
JVM_OPTIONS_ENV = "BALLAST_TEST_JVM_OPTIONS"
os.environ.setdefault("JAVA_TOOL_OPTIONS", os.environ.get(JVM_OPTIONS_ENV, "-XX:TieredStopAtLevel=1"))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--secure-stack",
        action="store_true",
        default=os.environ.get(SECURE_ENV, "") not in ("", "0"),
        help=f"run the session's broker secured (SASL_SSL, SCRAM, ACLs); also {SECURE_ENV}=1",
    )


def pytest_configure(config: pytest.Config) -> None:
    if config.pluginmanager.hasplugin("xdist"):
        from tests.support.lanes import LanePlugin

        config.pluginmanager.register(LanePlugin(), "ballast-lanes")


@pytest.hookimpl(tryfirst=True)  # before pytest's own -m filter, which reads these marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    from tests.support.lanes import run_order

    for item in items:
        parts = Path(str(item.fspath)).parts
        for folder, mark in FOLDER_MARKS.items():
            if folder in parts and item.get_closest_marker(mark) is None:
                item.add_marker(getattr(pytest.mark, mark))
    items.sort(key=lambda item: run_order(item.nodeid))


def _started_stack(tmp_path_factory: pytest.TempPathFactory, name: str, secure: bool) -> Iterator[object]:
    from ballast.devstack.jvm import StackSettings
    from ballast.devstack.stack import start_stack, stop_stack

    state_dir = tmp_path_factory.mktemp(name)
    settings = StackSettings.from_args()  # BALLAST_BROKER_HEAP …
    state = start_stack(state_dir, brokers=1, settings=settings, secure=secure)
    try:
        yield state
    finally:
        stop_stack(state_dir)


@pytest.fixture(scope="session")
def kafka_stack(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """One real single-node KRaft broker for the whole session, stopped at the end."""
    yield from _started_stack(tmp_path_factory, "stack", request.config.getoption("--secure-stack"))


@pytest.fixture(scope="session")
def secure_stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[object]:
    """A secured single-node stack: the session's when it is secured, else one of its own."""
    if request.config.getoption("--secure-stack"):
        yield request.getfixturevalue("kafka_stack")
        return
    yield from _started_stack(tmp_path_factory, "secure-stack", True)


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
def kafka_config(kafka_stack) -> KafkaConfig:
    from ballast.devstack.security import stack_admin

    return stack_admin(kafka_stack, "ballast-tests")


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
