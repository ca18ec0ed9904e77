"""The exact time lag, read from the broker: the append time of the record at a consumer's position.

Why its own measurement and not the shedder's: the benchmark judges the shedder, so the lag it
judges by must not come from the shedder's estimate (a table of sampled end offsets,
docs/shedder.md). Here the lag of a stage is ``now - timestamp(record at the stage's position)``,
the age of the oldest record it has not processed, read from the record itself, 0 when the stage
stands at the end:

* the routers: their group's committed offsets on the input topic (committed in their
  transactions); the input's timestamps are the feeder's create times, stamped as it produces;
* the reduce: the ``end_offsets`` of its latest ``ReduceProgress`` (the offset its last finished
  batch read up to, per routed partition; Spark commits no group offsets); the routed topic's
  timestamps are the broker's append times.

The record at a position is fetched read_uncommitted: its time is when it was appended, whether
or not its transaction has committed yet (a read_committed fetch would wait for the commit). A
position followed only by a transaction marker has no record to read and counts as at the end.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping

from confluent_kafka import Consumer, TopicPartition

from ballast.kafka.configuration import KafkaConfig
from ballast.kafka.groups import GroupOffsets

FETCH_TIMEOUT_S = 1.0


class AppendTimes:
    """Timestamps of the records at given offsets of one topic, with one long-lived consumer."""

    def __init__(self, kafka: KafkaConfig, topic: str, partitions: int) -> None:
        self.topic = topic
        self.partitions = partitions
        conf = kafka.consumer(
            f"bench-shed-probe-{uuid.uuid4().hex[:8]}",
            **{
                "isolation.level": "read_uncommitted",
                "fetch.max.bytes": 1 << 20,
                "max.partition.fetch.bytes": 1 << 16,
                "client.id": f"{kafka.client_id}-probe",
            },
        )
        self.consumer = Consumer(conf)

    def ends(self) -> dict[int, int]:
        return {
            p: self.consumer.get_watermark_offsets(TopicPartition(self.topic, p), timeout=10, cached=False)[1]
            for p in range(self.partitions)
        }

    def at(self, positions: Mapping[int, int], ends: Mapping[int, int]) -> dict[int, int | None]:
        """Per partition, the timestamp (ms) of the record at its position; None when the position is
        at the end (nothing unread) or only a marker follows it."""
        want = {p: o for p, o in positions.items() if 0 <= o < ends.get(p, 0)}
        out: dict[int, int | None] = dict.fromkeys(positions)
        if not want:
            return out
        self.consumer.assign([TopicPartition(self.topic, p, o) for p, o in want.items()])
        deadline = time.monotonic() + FETCH_TIMEOUT_S
        missing = set(want)
        while missing and time.monotonic() < deadline:
            for m in self.consumer.consume(len(missing) * 50, timeout=0.2):
                if m.error() is None and m.partition() in missing:
                    out[m.partition()] = m.timestamp()[1]
                    missing.discard(m.partition())
        self.consumer.unassign()
        return out

    def close(self) -> None:
        self.consumer.close()


def stage_lag(now_ms: int, positions: Mapping[int, int], ends: Mapping[int, int],
              times: Mapping[int, int | None]) -> tuple[float, int]:  # fmt: skip
    """A stage's time lag (seconds, the oldest over its partitions) and offset lag (records)."""
    lag_s = max((max(0, now_ms - t) / 1000 for t in times.values() if t is not None), default=0.0)
    records = sum(max(0, ends.get(p, 0) - o) for p, o in positions.items() if o >= 0)
    return lag_s, records


class LagProbe:
    """One sample of both stages' exact time lag (see the module docstring)."""

    def __init__(self, kafka: KafkaConfig, group: str, input_topic: str, input_partitions: int,
                 routed_topic: str, routed_partitions: int) -> None:  # fmt: skip
        self.group = GroupOffsets(kafka, group, input_topic, input_partitions)
        self.input = AppendTimes(kafka, input_topic, input_partitions)
        self.routed = AppendTimes(kafka, routed_topic, routed_partitions)

    def sample(self, reduce_ends: list[int]) -> dict[str, float | int | None]:
        """``reduce_ends``: the latest ``ReduceProgress.end_offsets`` ([]: the job has not reported)."""
        committed = self.group.committed()
        router: dict[int, int] = {}
        if committed is not None:
            router = {p: tp.offset if tp.offset >= 0 else 0 for p, tp in committed.items()}
        reduce = {p: o for p, o in enumerate(reduce_ends) if o >= 0}
        # positions first, then the ends: an end is never older than the position it is compared to
        input_ends, routed_ends = self.input.ends(), self.routed.ends()
        input_times = self.input.at(router, input_ends)
        routed_times = self.routed.at(reduce, routed_ends)
        now_ms = int(time.time() * 1000)
        router_s, router_records = stage_lag(now_ms, router, input_ends, input_times)
        reduce_s, reduce_records = stage_lag(now_ms, reduce, routed_ends, routed_times)
        return {
            "at_ms": now_ms,
            "router_s": round(router_s, 3) if committed is not None else None,
            "reduce_s": round(reduce_s, 3) if reduce_ends else None,
            "router_records": router_records,
            "reduce_records": reduce_records,
        }

    def close(self) -> None:
        for c in (self.group, self.input, self.routed):
            c.close()
