"""Following a topic as it fills: one consumer, every record read once, positions known.

Why one follower: tests, the demo, the benchmarks and (later) the services all watch topics they do
not own (the output topic for results, the metrics topic for statistics, the routed topic for
markers). Reading the whole topic again at every check is quadratic and slow; "read to the end"
must mean the end *as of the call*, judged by positions, not by a quiet spell that a busy topic
never has. A :class:`TopicFollower` is assigned every partition (no consumer group: nothing is
committed, every follower sees everything), reads read_committed like every Ballast client, and
raises on a consumer error instead of skipping it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from confluent_kafka import OFFSET_END, Consumer, KafkaError, Message, TopicPartition

from ballast.kafka.admin import make_admin, partition_count
from ballast.kafka.clients import high_watermark, make_consumer
from ballast.kafka.configuration import KafkaConfig
from ballast.kafka.identities import scratch_group
from ballast.waiting import WaitTimeout


class ConsumerError(RuntimeError):
    """The consumer reported an error while following a topic."""


class TopicFollower:
    """Every partition of ``topic`` from ``start`` ("beginning", "end", or offsets per partition)."""

    def __init__(
        self,
        kafka: KafkaConfig,
        topic: str,
        start: str | Mapping[int, int] = "beginning",
        partitions: int | None = None,
    ) -> None:
        self.topic = topic
        self.partitions = partitions or partition_count(make_admin(kafka), topic)
        self.consumer: Consumer = make_consumer(kafka, scratch_group("follow"))
        if start == "beginning":
            offsets = dict.fromkeys(range(self.partitions), 0)
        elif start == "end":
            offsets = dict.fromkeys(range(self.partitions), OFFSET_END)
        else:
            offsets = {p: int(start.get(p, 0)) for p in range(self.partitions)}  # type: ignore[union-attr]
        self.consumer.assign([TopicPartition(topic, p, off) for p, off in offsets.items()])
        # next offset to read per partition, as far as this follower knows (-1: not read yet)
        self.next: dict[int, int] = {p: (off if off >= 0 else -1) for p, off in offsets.items()}

    def poll(self, timeout: float = 0.5, batch: int = 10_000) -> list[Message]:
        """The records that arrived since the last call (waits up to ``timeout`` for the first)."""
        out = []
        for m in self.consumer.consume(batch, timeout=timeout):
            err = m.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    continue
                raise ConsumerError(f"following {self.topic}: {err}")
            self.next[m.partition()] = m.offset() + 1
            out.append(m)
        return out

    def end_offsets(self) -> dict[int, int]:
        """The high watermark of every partition, now."""
        return {p: high_watermark(self.consumer, self.topic, p) for p in range(self.partitions)}

    def positions(self) -> dict[int, int]:
        """Where the consumer stands per partition (read_committed: never past the stable offset)."""
        tps = self.consumer.position([TopicPartition(self.topic, p) for p in range(self.partitions)])
        return {tp.partition: tp.offset for tp in tps}

    def read_to_end(self, timeout: float = 60.0) -> list[Message]:
        """Every record up to the ends as they are at the call.

        An open transaction holds a read_committed consumer below the end; it is waited for (until
        ``timeout``, then :class:`~ballast.waiting.WaitTimeout` naming where the reader stands).
        """
        ends = self.end_offsets()
        out: list[Message] = []
        deadline = time.monotonic() + timeout
        while True:
            out += self.poll(0.2)
            positions = self.positions()
            if all(end == 0 or positions.get(p, -1) >= end for p, end in ends.items()):
                return out
            if time.monotonic() > deadline:
                raise WaitTimeout(f"reading {self.topic} to {ends}: stuck at {positions} after {timeout:g} s")

    def close(self) -> None:
        self.consumer.close()

    def __enter__(self) -> TopicFollower:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
