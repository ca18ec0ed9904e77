"""Offsets read from the cluster: the routers' committed offsets, then every partition's log end.

Why the committed offsets come from a consumer's ``committed()`` and not the AdminClient's
``ListConsumerGroupOffsets``: librdkafka (2.16.0, the newest we can pin; upstream issue #4605, open)
aborts the whole process (``rd_kafka_enq_once_del_source_return: Assertion 'eonce->refcnt > 0'``,
SIGABRT) when a coordinator-bound admin request times out while the group coordinator is down and
the coordinator comes back later: the request still queued for it then runs on a freed object. A
Python process cannot catch that, and a broker outage longer than the request timeout is all it
takes (docs/shedder.md, "Sampling through broker outages"). A consumer's ``committed()`` sends the
same OffsetFetch through the consumer group's own coordinator handling, which has no such path. The
consumer carries the routers' ``group.id`` but never subscribes: it joins nothing and commits
nothing (as :class:`~ballast.kafka.groups.GroupOffsets` does). It reads ``read_uncommitted``, which
is what makes its OffsetFetch not ask for stable offsets: an offset commit still inside an open
router transaction is not waited for, and the answer is the last committed offset, as the
AdminClient's default and kafka-lag-exporter's answer is.

Why the log ends come from the AdminClient's ``ListOffsets``: one batched request per partition
leader, not one round trip per partition, as kafka-lag-exporter does; it goes to the partition
leaders, not to a coordinator, so it does not take the path above. Two things it does in an outage
are handled here: a partition whose leader did not answer in time comes back as offset -1001 with no
error (read as missing, never as an offset), and after a leader moved it keeps asking with the old
leader epoch (FENCED_LEADER_EPOCH on every call, measured for minutes) until the client's metadata
is refreshed, so any failed partition makes the next sample list the topics again.

Why not faust's clients: the shedder reads offsets of groups it is not a member of and of topics it
does not consume, which faust has no API for. Every call here blocks, so the service calls
:meth:`OffsetSampler.sample` from a worker thread, never on faust's event loop.

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

from confluent_kafka import Consumer, IsolationLevel, KafkaException, TopicPartition
from confluent_kafka.admin import OffsetSpec

from ballast.kafka.admin import make_admin
from ballast.kafka.configuration import KafkaConfig

log = logging.getLogger(__name__)

TP = tuple[str, int]

# A future's wait beyond the request's own timeout: the request's timeout answers first (as a
# KafkaException), so a wait that runs out is a client stuck, not a broker that is slow.
WAIT_GRACE_S = 2.0


@dataclass(frozen=True)
class OffsetSample:
    """One sample: the routers' positions (None: none committed), then the log ends and starts."""

    committed: dict[TP, int | None]
    committed_at: float  # time.monotonic() when the positions were read
    ends: dict[TP, int]
    log_starts: dict[TP, int] = field(default_factory=dict)
    ended_at: float = 0.0  # time.monotonic() when the ends were read
    errors: tuple[str, ...] = ()


def positions_consumer(kafka: KafkaConfig, group: str) -> Consumer:
    """A consumer that only asks ``group``'s committed offsets (module docstring: why a consumer)."""
    conf = kafka.consumer(
        group,
        **{
            "client.id": f"{kafka.client_id}-positions",
            "isolation.level": "read_uncommitted",  # no require-stable OffsetFetch (module docstring)
            "enable.auto.commit": False,
        },
    )
    conf.pop("group.instance.id", None)  # it never joins: a static member id would only mislead
    return Consumer(conf)


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
        self.positions = positions_consumer(kafka, group)
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
            try:
                for tp in self.positions.committed(inputs, timeout=self.timeout_s):
                    if tp.error is None and tp.offset >= 0:
                        committed[(tp.topic, tp.partition)] = tp.offset
            except KafkaException as exc:  # the coordinator cannot answer now (moving, down, loading)
                errors.append(f"committed offsets of {self.group}: {exc}")
        committed_at = time.monotonic()
        every = [TopicPartition(t, p) for t, n in counts.items() for p in range(n)]
        failed = len(errors)
        ends = self._offsets(every, OffsetSpec.latest(), errors)
        # a partition whose leader did not answer now would make the starts wait out the timeout too
        answered = [tp for tp in every if (tp.topic, tp.partition) in ends]
        starts = self._offsets(answered, OffsetSpec.earliest(), errors)
        if len(errors) > failed:  # a leader moved or is away: fresh metadata (leaders, epochs) first
            self._refreshed = -float("inf")
        return OffsetSample(committed, committed_at, ends, starts, time.monotonic(), tuple(errors))

    def close(self) -> None:
        self.positions.close()

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
        except KafkaException as exc:
            errors.append(f"offsets: {exc}")
            return out
        deadline = time.monotonic() + self.timeout_s + WAIT_GRACE_S
        for tp, future in futures.items():
            try:
                offset = future.result(max(0.0, deadline - time.monotonic())).offset
            except (KafkaException, TimeoutError) as exc:  # a leader that cannot answer now
                errors.append(f"offsets of {tp.topic}[{tp.partition}]: {str(exc) or 'no answer'}")
                continue
            if offset < 0:  # no leader answered in time, reported without an error
                errors.append(f"offsets of {tp.topic}[{tp.partition}]: no offset ({offset})")
            else:
                out[(tp.topic, tp.partition)] = offset
        return out
