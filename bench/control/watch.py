"""When each epoch became visible: one read_committed follower of the control and routed topics.

Why one consumer for both topics: the control record's arrival and the markers' arrival are
stamped by the same client, on the same clock, with the same fetch behaviour, so the difference
between them is the routers' work and not two clients' fetch timing. It polls continuously in a
thread (``poll`` returns at the first record; what is already fetched is drained without waiting),
and ``fetch.wait.max.ms`` is short, so a record is stamped within a few milliseconds of becoming
visible. Data records are recognised by their first bytes and skipped; only markers are decoded.

The frontier is the docs/router.md one: epoch e is visible once every routed partition holds, for
every input partition, a marker of epoch >= e covering it.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, Consumer, KafkaError, Message, TopicPartition

from ballast.avro.codec import AvroCodec
from ballast.avro.wire import MARKER_PREFIX
from ballast.kafka.configuration import KafkaConfig
from ballast.kafka.topics import TopicLayout

FETCH_WAIT_MS = 5  # the follower's longest fetch wait: a bound on its own share of the latency


@dataclass
class EpochTimes:
    """What the follower saw of one epoch (wall-clock seconds; broker append times in ms)."""

    control_append_ms: int | None = None
    control_seen_s: float | None = None
    marker_append_ms: int | None = None  # the latest append time among the markers that made it visible
    visible_s: float | None = None

    def sample(self) -> dict[str, float]:
        """The latency and its split, in ms: ``control`` + ``router`` + ``commit`` = ``total``."""
        assert self.control_append_ms is not None and self.control_seen_s is not None
        assert self.marker_append_ms is not None and self.visible_s is not None
        seen, visible = self.control_seen_s * 1000, self.visible_s * 1000
        return {
            "total": round(visible - self.control_append_ms, 2),
            "control": round(seen - self.control_append_ms, 2),
            "router": round(self.marker_append_ms - seen, 2),
            "commit": round(visible - self.marker_append_ms, 2),
        }


class VisibilityWatch:
    """Follows one deployment's control and routed topics from their beginning, in a thread."""

    def __init__(self, kafka: KafkaConfig, layout: TopicLayout, input_partitions: int) -> None:
        self.control_topic = layout.name("control")
        self.routed_topic = layout.name("routed")
        self.inputs = [(layout.name("input"), p) for p in range(input_partitions)]
        self.routed_partitions = layout.workers
        self.consumer = Consumer(
            kafka.consumer(
                f"bench-control-watch-{layout.prefix}",
                **{"fetch.wait.max.ms": FETCH_WAIT_MS, "client.id": "bench-control-watch"},
            )
        )
        parts = [TopicPartition(self.control_topic, 0, 0)]
        parts += [TopicPartition(self.routed_topic, w, 0) for w in range(self.routed_partitions)]
        self.consumer.assign(parts)
        self.codec = AvroCodec("io.ballast.RoutedEnvelope")
        # routed partition -> input partition -> highest marker epoch covering it there
        self.covered: list[dict[tuple[str, int], int]] = [{} for _ in range(self.routed_partitions)]
        self.frontier = -1
        self.marker_ms: dict[int, int] = {}  # epoch -> latest append time of its markers so far
        self.times: dict[int, EpochTimes] = {}
        self.markers_seen = 0
        self._changed = threading.Condition()
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="control-watch", daemon=True)
        self._thread.start()

    # --- the follower thread ------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                first = self.consumer.poll(0.1)
                if first is None:
                    continue
                now = time.time()
                for m in [first, *self.consumer.consume(10_000, 0)]:
                    self._take(m, now)
        except BaseException as exc:  # reported to the waiting thread
            with self._changed:
                self._error = exc
                self._changed.notify_all()

    def _take(self, m: Message, now: float) -> None:
        err = m.error()
        if err is not None:
            if err.code() == KafkaError._PARTITION_EOF:
                return
            raise RuntimeError(f"follower: {err}")
        kind, ts = m.timestamp()
        if kind != TIMESTAMP_LOG_APPEND_TIME:
            raise RuntimeError(
                f"{m.topic()} does not stamp LogAppendTime: the benchmark needs the broker's clock"
            )
        if m.topic() == self.control_topic:
            epoch = int(m.key())  # the control writer keys each event by its epoch
            with self._changed:
                t = self.times.setdefault(epoch, EpochTimes())
                t.control_append_ms, t.control_seen_s = ts, now
            return
        value = m.value()
        if not value or not value.startswith(MARKER_PREFIX):
            return
        body = self.codec.decode(value, m.topic(), m.partition(), m.offset())["body"][1]
        epoch = int(body["epoch"])
        covered = self.covered[m.partition()]
        for c in body.get("covers", ()):
            tp = (c["topic"], int(c["partition"]))
            covered[tp] = max(covered.get(tp, -1), epoch)
        with self._changed:
            self.markers_seen += 1
            self.marker_ms[epoch] = max(self.marker_ms.get(epoch, 0), ts)
            lowest = min(c.get(tp, -1) for c in self.covered for tp in self.inputs)
            if lowest > self.frontier:
                for e in range(self.frontier + 1, lowest + 1):
                    t = self.times.setdefault(e, EpochTimes())
                    t.visible_s = now
                    t.marker_append_ms = max(ms for k, ms in self.marker_ms.items() if e <= k <= lowest)
                self.frontier = lowest
                self._changed.notify_all()

    # --- the benchmark's side ---------------------------------------------------------------------

    def wait_visible(self, epoch: int, timeout: float) -> EpochTimes:
        """Until ``epoch`` is visible everywhere and its control record was seen; its times."""

        def ready() -> bool:
            t = self.times.get(epoch)
            return self._error is not None or (
                t is not None and t.visible_s is not None and t.control_seen_s is not None
            )

        with self._changed:
            if not self._changed.wait_for(ready, timeout):
                raise TimeoutError(
                    f"epoch {epoch} not visible within {timeout:g} s (frontier {self.frontier})"
                )
            if self._error is not None:
                raise RuntimeError(f"the follower failed: {self._error!r}") from self._error
            return self.times[epoch]

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.consumer.close()
