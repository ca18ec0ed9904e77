"""What the demo reads back: every write of the reduce's output topic, and the job's dead letters.

Why every write: a wrong row overwritten later is still a wrong row, so the check
(:mod:`services.demo.check`) sees each window's writes in order, not only the latest.
"""

from __future__ import annotations

from collections import Counter, defaultdict

from ballast.avro.codec import AvroCodec
from ballast.kafka.configuration import KafkaConfig
from ballast.kafka.dead_letters import DeadLetter
from ballast.kafka.follow import TopicFollower
from ballast.kafka.reading import read_topic
from services.demo.check import Window, Write


class OutputWindows:
    """The output topic, read as it fills: every record ``job`` wrote, by key and window."""

    def __init__(self, cfg: KafkaConfig, topic: str, job: str) -> None:
        self.job = job
        self.follower = TopicFollower(cfg, topic)
        self.codec = AvroCodec("io.ballast.OutputResult")
        self.writes: dict[Window, list[Write]] = defaultdict(list)
        self.keys: set[str] = set()

    def poll(self, timeout: float = 0.5) -> int:
        msgs = self.follower.poll(timeout)
        self._take(msgs)
        return len(msgs)

    def drain(self, timeout: float = 60.0) -> None:
        """Read up to the end offsets as of now (the job writes without transactions: no markers)."""
        self._take(self.follower.read_to_end(timeout))

    def _take(self, msgs: list) -> None:
        for m in msgs:
            r = self.codec.decode(m.value(), m.topic(), m.partition(), m.offset())
            if r["job"] == self.job:
                self.writes[(r["key"], r["window_start"], r["window_end"])].append(
                    (r["worker"], r["count"], r["sum"])
                )
                self.keys.add(r["key"])

    def close(self) -> None:
        self.follower.close()


def dead_letters(cfg: KafkaConfig, topic: str, routed: str) -> Counter[str]:
    """The reduce's dead letters by reason (the router's name the input topic as their source)."""
    reasons: Counter[str] = Counter()
    for m in read_topic(cfg, topic, idle=1.5, timeout=60):
        letter = DeadLetter.of(m)
        if letter.topic == routed:
            reasons[letter.reason or "?"] += 1
    return reasons
