"""What a consumer group has committed: how far a group of routers (or any group) has processed.

Why from the group's committed offsets: a router commits an input offset only together with
everything it routed before it (in one transaction under exactly-once), so the sum of committed
offsets is the count of input records whose output is durable, read from outside the routers.
A consumer in the group that never subscribes asks; it joins nothing and commits nothing.
"""

from __future__ import annotations

from confluent_kafka import Consumer, KafkaException, TopicPartition

from ballast.kafka.admin import make_admin, partition_count
from ballast.kafka.configuration import KafkaConfig


class GroupOffsets:
    """Asks one group's committed offsets of one topic, with one long-lived client."""

    def __init__(self, kafka: KafkaConfig, group: str, topic: str, partitions: int | None = None) -> None:
        self.topic = topic
        self.partitions = partitions or partition_count(make_admin(kafka), topic)
        self.consumer = Consumer(kafka.consumer(group, **{"client.id": f"{kafka.client_id}-offsets"}))

    def committed(self, timeout: float = 10.0) -> dict[int, TopicPartition] | None:
        """Per partition, the committed position (offset < 0: none) with its metadata; None when the
        group coordinator cannot answer right now (loading, moving)."""
        tps = [TopicPartition(self.topic, p) for p in range(self.partitions)]
        try:
            return {tp.partition: tp for tp in self.consumer.committed(tps, timeout=timeout)}
        except KafkaException:
            return None

    def total(self) -> int:
        """Sum of the committed offsets (-1 when the coordinator cannot answer right now)."""
        found = self.committed()
        return -1 if found is None else sum(max(tp.offset, 0) for tp in found.values())

    def close(self) -> None:
        self.consumer.close()
