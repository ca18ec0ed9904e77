"""Offsets read from the cluster: the routers' committed offsets, then every partition's log end.

Why confluent-kafka's AdminClient and not faust's consumer: the shedder reads offsets of groups it
is not a member of and of topics it does not consume, which faust has no API for, and one batched
``ListOffsets`` per sample is what kafka-lag-exporter does too. The AdminClient blocks, so the
service calls :meth:`OffsetSampler.sample` from a worker thread, never on faust's event loop.

Why committed offsets first: a position read after the end offsets could be past them and show a
negative lag; read before, the end is never older than the position (docs/shedder.md, "Sampling").
The end offset is the last stable offset (``READ_COMMITTED``): the routed topic is written in
transactions and its readers read committed, so an open transaction's records are not yet lag.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from confluent_kafka import ConsumerGroupTopicPartitions, IsolationLevel, KafkaException, TopicPartition
from confluent_kafka.admin import OffsetSpec

from ballast.kafka.admin import make_admin
from ballast.kafka.configuration import KafkaConfig

log = logging.getLogger(__name__)

TP = tuple[str, int]


@dataclass(frozen=True)
class OffsetSample:
    """One sample: the routers' positions (None: none committed), then the log ends and starts."""

    committed: dict[TP, int | None]
    committed_at: float  # time.monotonic() when the positions were read
    ends: dict[TP, int]
    log_starts: dict[TP, int] = field(default_factory=dict)
    ended_at: float = 0.0  # time.monotonic() when the ends were read
    errors: tuple[str, ...] = ()


class OffsetSampler:
    """Reads the offsets of ``input_topics`` (for ``group``) and of ``other_topics`` (ends only)."""

    def __init__(
        self,
        kafka: KafkaConfig,
        input_topics: Sequence[str],
        group: str,
        other_topics: Sequence[str] = (),
        timeout_s: float = 10.0,
        refresh_s: float = 30.0,
    ) -> None:
        self.admin = make_admin(kafka.with_client_id(f"{kafka.client_id}-offsets"))
        self.input_topics = tuple(input_topics)
        self.other_topics = tuple(other_topics)
        self.group = group
        self.timeout_s = timeout_s
        self.refresh_s = refresh_s
        self._partitions: dict[str, int] = {}
        self._refreshed = -float("inf")

    def partitions(self) -> dict[str, int]:
        """Partitions per topic, asked again every ``refresh_s`` (a topic may gain partitions)."""
        now = time.monotonic()
        if now - self._refreshed >= self.refresh_s or not self._partitions:
            md = self.admin.list_topics(timeout=self.timeout_s)
            found = {}
            for topic in (*self.input_topics, *self.other_topics):
                t = md.topics.get(topic)
                if t is not None and t.error is None and t.partitions:
                    found[topic] = len(t.partitions)
            self._partitions, self._refreshed = found, now
        return self._partitions

    def sample(self) -> OffsetSample:
        """One sample; a part the cluster cannot answer now is missing and named in ``errors``."""
        errors: list[str] = []
        counts = self.partitions()
        inputs = [TopicPartition(t, p) for t in self.input_topics for p in range(counts.get(t, 0))]
        committed: dict[TP, int | None] = {(tp.topic, tp.partition): None for tp in inputs}
        if inputs:
            request = [ConsumerGroupTopicPartitions(self.group, inputs)]
            try:
                result = self.admin.list_consumer_group_offsets(request, request_timeout=self.timeout_s)
                for tp in result[self.group].result(self.timeout_s).topic_partitions:
                    if tp.error is None and tp.offset >= 0:
                        committed[(tp.topic, tp.partition)] = tp.offset
            except KafkaException as exc:
                errors.append(f"committed offsets of {self.group}: {exc}")
        committed_at = time.monotonic()
        every = [TopicPartition(t, p) for t, n in counts.items() for p in range(n)]
        ends = self._offsets(every, OffsetSpec.latest(), errors)
        starts = self._offsets(every, OffsetSpec.earliest(), errors)
        return OffsetSample(committed, committed_at, ends, starts, time.monotonic(), tuple(errors))

    def _offsets(self, tps: list[TopicPartition], spec: OffsetSpec, errors: list[str]) -> dict[TP, int]:
        if not tps:
            return {}
        out: dict[TP, int] = {}
        try:
            futures = self.admin.list_offsets(
                {tp: spec for tp in tps},
                isolation_level=IsolationLevel.READ_COMMITTED,
                request_timeout=self.timeout_s,
            )
            for tp, future in futures.items():
                try:
                    out[(tp.topic, tp.partition)] = future.result(self.timeout_s).offset
                except KafkaException as exc:
                    errors.append(f"offsets of {tp.topic}[{tp.partition}]: {exc}")
        except KafkaException as exc:
            errors.append(f"offsets: {exc}")
        return out
