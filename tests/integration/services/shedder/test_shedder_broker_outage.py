"""The shedder keeps sampling through broker outages, on a 3-broker stack of its own.

The broker killed (kill -9) is the one that coordinates the routers' group and leads both partitions
of the sampled input topic: the topic is made with that broker as every partition's preferred leader,
and after each restart a preferred-leader election gives it the group and the partitions back, so
every outage takes them all away again. It stays down 15 s, longer than the sampler's 10 s request
timeout, three times. Before the fix the shedder aborted inside librdkafka the first time the broker
came back (``rd_kafka_enq_once_del_source_return: Assertion 'eonce->refcnt > 0' failed``, exit -6:
the AdminClient's ListConsumerGroupOffsets that timed out while the coordinator was away; the abort
is docs/shedder.md's "Sampling through broker outages").

The ground truth is what the test itself does and reads: before each outage and after the last one
it commits new offsets for the routers' group and reads the partitions' log ends with its own
consumer, and the shedder's ``LagSample``s must show exactly those committed offsets and ends at
least as far; every end offset published is a real one (never negative, never going back).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, ElectionType, KafkaException, TopicPartition
from confluent_kafka.admin import NewTopic

from ballast.devstack.brokers import start_node, stop_node, wait_for_cluster
from ballast.devstack.jvm import StackSettings
from ballast.devstack.stack import start_stack, stop_stack
from ballast.devstack.state import StackState
from ballast.harness.pipeline import Pipeline
from ballast.kafka.admin import make_admin
from ballast.kafka.clients import high_watermark, make_consumer
from ballast.kafka.configuration import KafkaConfig
from ballast.kafka.topics import TopicLayout
from ballast.metrics.records import LagSample
from ballast.waiting import wait_until
from tests.support.shedder_kit import Feeder

DOWN_S = 15.0  # longer than the sampler's 10 s request timeout
OUTAGES = 3
PARTITIONS = 2
OFFSETS_TOPIC = "__consumer_offsets"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[StackState]:
    folder = tmp_path_factory.mktemp("outage-cluster")
    state = start_stack(folder, brokers=3, settings=StackSettings.from_args())
    try:
        yield state
    finally:
        stop_stack(folder)


def coordinator_partition(group: str, partitions: int) -> int:
    """The partition of ``__consumer_offsets`` that holds ``group``: Kafka's
    ``Utils.abs(groupId.hashCode()) % partitions`` (Java's String hash over UTF-16 code units)."""
    h = 0
    units = group.encode("utf-16-be")
    for i in range(0, len(units), 2):
        h = (31 * h + int.from_bytes(units[i : i + 2], "big")) & 0xFFFFFFFF
    signed = h - (1 << 32) if h >= 1 << 31 else h
    return (0 if signed == -(1 << 31) else abs(signed)) % partitions


class Outages:
    """The cluster seen from the test: who leads what, the kill and the restart of one broker."""

    def __init__(self, state: StackState, kafka: KafkaConfig, group: str, topic: str) -> None:
        self.state, self.kafka, self.group, self.topic = state, kafka, group, topic
        self.admin = make_admin(kafka.with_client_id("outage-test-admin"))
        self.consumer = Consumer(kafka.consumer(group, **{"client.id": "outage-test-offsets"}))
        self.broker = 0
        self.offsets_partition = -1

    def leaders(self) -> dict[TopicPartition, int]:
        """The leader of the group's ``__consumer_offsets`` partition and of the topic's partitions."""
        md = self.admin.list_topics(timeout=10).topics
        parts = [(OFFSETS_TOPIC, self.offsets_partition)] + [(self.topic, p) for p in range(PARTITIONS)]
        found = {}
        for t, p in parts:  # a topic just created may not be in this broker's metadata yet: -1
            partitions = md[t].partitions if t in md else {}
            found[TopicPartition(t, p)] = partitions[p].leader if p in partitions else -1
        return found

    def elect(self) -> bool:
        """A preferred-leader election of those partitions; whether ``broker`` leads them all now."""
        leaders = self.leaders()
        if set(leaders.values()) == {self.broker}:
            return True
        if -1 in leaders.values():
            return False  # not known everywhere yet: ask again
        try:
            self.admin.elect_leaders(ElectionType.PREFERRED, list(leaders)).result(30)
        except Exception:  # not in the ISR yet: ask again
            return False
        return set(self.leaders().values()) == {self.broker}

    def commit(self, offsets: list[int]) -> None:
        """Commit for the group, again while its coordinator is still loading after a move."""
        tps = [TopicPartition(self.topic, p, o) for p, o in enumerate(offsets)]

        last: list[str] = []

        def committed() -> bool:
            try:
                self.consumer.commit(offsets=tps, asynchronous=False)
            except KafkaException as exc:  # COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR: again
                last[:] = [str(exc)]
                return False
            return True

        wait_until(committed, 60, f"offsets {offsets} committed for {self.group}", interval=0.5,
                   describe=lambda: f"last error {last}")  # fmt: skip

    def ends(self) -> list[int]:
        """The partitions' log ends, asked by a new client: one that has never sampled this topic has
        no cached leader to be wrong about after an outage."""
        probe = make_consumer(self.kafka.with_client_id("outage-test-ends"), f"{self.group}-probe")
        try:
            # asked again while the restarted broker's high watermark catches up after the election
            return [high_watermark(probe, self.topic, p) for p in range(PARTITIONS)]
        finally:
            probe.close()

    def close(self) -> None:
        self.consumer.close()


def test_the_shedder_samples_on_through_outages_of_the_coordinator_and_leader(cluster, unique, tmp_path):
    kafka = KafkaConfig.plaintext(cluster.bootstrap, "outage-test")
    layout = TopicLayout(prefix=unique("outage"), workers=2, input_partitions=PARTITIONS)
    pipe = Pipeline(kafka, layout, tmp_path / "stack", issuer="shedder-outage-test")
    group, topic = pipe.router_group, f"{layout.prefix}.input-b"
    cluster_view = Outages(cluster, kafka, group, topic)
    feeder = None
    try:
        # the group's coordinator: the leader of its __consumer_offsets partition (asking the group's
        # committed offsets once makes the internal topic exist)
        cluster_view.consumer.committed([TopicPartition(layout.name("input"), 0)], timeout=30)
        md = cluster_view.admin.list_topics(OFFSETS_TOPIC, timeout=10).topics[OFFSETS_TOPIC]
        cluster_view.offsets_partition = coordinator_partition(group, len(md.partitions))
        broker = cluster_view.broker = md.partitions[cluster_view.offsets_partition].leader
        others = [b for b in (1, 2, 3) if b != broker]
        assignment = [[broker, *others], [broker, *reversed(others)]]
        cluster_view.admin.create_topics([NewTopic(topic, PARTITIONS, replica_assignment=assignment)])[
            topic
        ].result(30)
        wait_until(cluster_view.elect, 30, f"broker {broker} leading {topic}")
        cluster_view.commit([0] * PARTITIONS)
        described = cluster_view.admin.describe_consumer_groups([group])[group].result(30)
        assert described.coordinator.id == broker, "the test's premise: it kills the group's coordinator"

        feeder = Feeder(kafka, {topic: 100})
        feeder.start()
        declaration = f"topic={topic},target=30s,priority=0,min-accuracy=0.5"
        pipe.start(pipe.shedder(declaration, dry_run=True, cycle_s=1, sample_s=0.5, log_level="info"))
        reader = pipe.metrics()
        published: list[tuple[int, LagSample]] = []

        def seen(offsets: list[int], ends: list[int]) -> bool:
            published.extend((m.interval_end, s) for m, s in reader.of(LagSample)[len(published) :])
            newest = {s.partition: s for _, s in published if s.group == group and s.topic == topic}
            return all(
                p in newest and newest[p].committed_offset == offsets[p] and newest[p].end_offset >= ends[p]
                for p in range(PARTITIONS)
            )

        def sampled(round_: int) -> None:
            """New committed offsets, then the shedder must publish them with fresh log ends."""
            offsets = [100 * (round_ + 1) + p for p in range(PARTITIONS)]
            cluster_view.commit(offsets)
            ends = cluster_view.ends()
            reader.wait_for(lambda _: seen(offsets, ends), 60, f"lag samples of round {round_}: "
                            f"committed {offsets}, ends at least {ends}")  # fmt: skip

        for outage in range(OUTAGES):
            sampled(outage)
            leaders = cluster_view.leaders()
            assert set(leaders.values()) == {broker}, leaders
            stop_node(cluster, broker, hard=True)
            time.sleep(DOWN_S)
            pipe.check_running("shedder")
            start_node(cluster, broker)
            wait_for_cluster(cluster.bootstrap, 3, timeout=120)
            wait_until(cluster_view.elect, 60, f"broker {broker} leading the group and {topic} again")
            pipe.check_running("shedder")
        sampled(OUTAGES)
        pipe.check_running("shedder")
        assert pipe.stop("shedder") == 0, pipe.log_tail("shedder")
    finally:
        if feeder is not None:
            feeder.stop.set()
            feeder.join(30)
        cluster_view.close()
        pipe.close()

    ends: dict[int, list[int]] = {}
    for _, s in sorted(published, key=lambda item: item[0]):
        if s.group == group and s.topic == topic:
            ends.setdefault(s.partition, []).append(s.end_offset)
    for p, seq in ends.items():
        assert min(seq) >= 0 and seq == sorted(seq), f"partition {p}: end offsets {seq}"
