"""Which epoch every routed partition has reached: the epoch markers, read from the routed topic.

Why markers and not the routers' word: a router applies an epoch by writing a marker covering its
input partitions into every routed partition (the frontier rule, docs/router.md); a worker acts
on epoch e once every input partition is covered by a marker >= e in its partition. Watching the
same markers tells a harness when "the routers applied epoch e" holds in the sense that matters
to the reduce, whichever routers own which partitions. Only markers are decoded: data records and
chunks are recognised by their first bytes (the header of any registered ``RoutedEnvelope``
version, then the union branch) and skipped. Every registered version counts: during a rolling
upgrade, routers of the old release announce epochs too.
"""

from __future__ import annotations

from collections import defaultdict

from ballast.avro.codec import AvroCodec, default_store
from ballast.avro.wire import zigzag
from ballast.kafka.admin import make_admin, partition_count
from ballast.kafka.configuration import KafkaConfig
from ballast.kafka.follow import TopicFollower

ENVELOPE = "io.ballast.RoutedEnvelope"


def branch_prefixes(branch: str) -> frozenset[bytes]:
    """The first bytes of an envelope holding ``branch`` (``io.ballast.EpochMarker``, …), for every
    registered version: its header, then the branch's index in that version's union."""
    found = set()
    for version in default_store().versions(ENVELOPE):
        (body,) = version.source["fields"]
        space = version.source.get("namespace", "")
        names = [
            b["name"] if "." in b["name"] else f"{b.get('namespace', space)}.{b['name']}"
            for b in body["type"]
        ]
        if branch in names:
            found.add(version.header + zigzag(names.index(branch)))
    return frozenset(found)


MARKERS = branch_prefixes("io.ballast.EpochMarker")
DATA = branch_prefixes("io.ballast.DataRecord")
PREFIX_LEN = len(next(iter(MARKERS)))


class MarkerWatch:
    """Follows the routed topic; the frontier per routed partition over every input partition."""

    def __init__(self, kafka: KafkaConfig, routed_topic: str, input_topics: tuple[str, ...]) -> None:
        self.follower = TopicFollower(kafka, routed_topic)
        admin = make_admin(kafka)
        self.inputs = {(t, p) for t in input_topics for p in range(partition_count(admin, t))}
        self.codec = AvroCodec(ENVELOPE)
        # routed partition -> input partition -> highest marker epoch covering it there
        self.seen: dict[int, dict[tuple[str, int], int]] = defaultdict(dict)

    def poll(self) -> int:
        """Read what arrived; the lowest frontier over all routed partitions (-1: not all announced)."""
        while msgs := self.follower.poll(0.05):
            for m in msgs:
                value = m.value()
                if not value or value[:PREFIX_LEN] not in MARKERS:
                    continue
                body = self.codec.decode(value, m.topic(), m.partition(), m.offset())["body"][1]
                covered = self.seen[m.partition()]
                for c in body.get("covers", ()):
                    tp = (c["topic"], int(c["partition"]))
                    covered[tp] = max(covered.get(tp, -1), int(body["epoch"]))
        return self.lowest()

    def frontier(self, partition: int) -> int:
        covered = self.seen.get(partition, {})
        return min((covered.get(tp, -1) for tp in self.inputs), default=-1)

    def lowest(self) -> int:
        return min(self.frontier(p) for p in range(self.follower.partitions))

    def close(self) -> None:
        self.follower.close()


def routed_records(
    kafka: KafkaConfig, routed_topic: str, timeout: float = 300.0
) -> tuple[list[int], list[int]]:
    """Every data record of the routed topic up to its end now: its event time and its partition,
    which is the worker the routers sent it to (markers and state chunks are skipped)."""
    codec = AvroCodec(ENVELOPE)
    times: list[int] = []
    workers: list[int] = []
    with TopicFollower(kafka, routed_topic) as follower:
        for m in follower.read_to_end(timeout):
            value = m.value()
            if value and value[:PREFIX_LEN] in DATA:
                times.append(int(codec.decode(value)["body"][1]["event_time"]))
                workers.append(m.partition())
    return times, workers
