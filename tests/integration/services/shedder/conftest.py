"""The shedder's integration tests: a deployment with a second input topic (tests/support/shedder_kit.py
has the input feeder and the consumer standing in for the routers)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ballast.harness.pipeline import Pipeline
from ballast.kafka.admin import ensure_topics
from ballast.kafka.topics import TopicLayout, TopicSpec
from tests.support.shedder_kit import PARTITIONS, WORKERS, second_input


@pytest.fixture
def pipe(kafka_config, unique, tmp_path, admin) -> Iterator[Pipeline]:
    layout = TopicLayout(prefix=unique("shed"), workers=WORKERS, input_partitions=PARTITIONS)
    pipeline = Pipeline(kafka_config, layout, tmp_path / "stack", issuer="shedder-tests")
    ensure_topics(admin, [TopicSpec("input", second_input(layout), PARTITIONS)])
    try:
        yield pipeline
    finally:
        pipeline.close()
