"""Spark's Kafka consumers of a reduce job take groups under its deployment's prefix
(``groupIdPrefix`` = ``<prefix>.reduce``), on both sources, with the connection's options kept."""

from __future__ import annotations

from ballast.kafka.configuration import KafkaConfig
from ballast.kafka.identities import reduce_group_prefix
from spark_jobs.reduce.job import source_options
from spark_jobs.reduce.stateful import JobSpec


def test_both_sources_read_committed_under_the_deployments_group_prefix():
    kafka = KafkaConfig.plaintext("b1:9092", "test")
    spec = JobSpec(
        job="orders-aggregate-00000000",
        kafka=kafka,
        topics={"routed": "orders.routed", "control": "orders.control"},
        routed_partitions=2,
        labels=(0, 1),
        processor="aggregate:size=10s",
        input_partitions=("orders.input:0",),
        group_prefix=reduce_group_prefix("orders"),
    )
    options = source_options(spec)
    assert options["groupIdPrefix"] == "orders.reduce"
    assert options["kafka.bootstrap.servers"] == "b1:9092"
    assert options["kafka.isolation.level"] == "read_committed"
    assert "kafka.group.id" not in options  # it would make Spark ignore groupIdPrefix
