"""One reader of the metrics topic: typed records, each read once, filtered by kind and source.

Why one: the demo, the benchmarks, the test kits and the controller each had a loop of their own
over the metrics topic, decoding dicts and picking branches by name, and one of them read the whole
topic again on every check. :class:`MetricsReader` follows the topic with a
:class:`~ballast.kafka.follow.TopicFollower` (every record once) and keeps what it read, so
"every WorkerStats of job X so far" is a filter over a list, not another pass over the topic.
A record it cannot decode is counted (:attr:`MetricsReader.undecodable`) and skipped: metrics are
observations, and one bad record must not stop the reader of all the others.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import TypeVar

from ballast.avro.codec import AvroCodec
from ballast.kafka.configuration import KafkaConfig
from ballast.kafka.follow import TopicFollower
from ballast.metrics.records import Body, Metric, metric_of
from ballast.waiting import wait_until

log = logging.getLogger(__name__)

B = TypeVar("B", bound=Body)


class MetricsReader:
    """Follows ``topic`` from ``start`` ("beginning", "end" or offsets) and keeps every metric read
    (``keep=False``: keeps none, for a service that follows the topic for days)."""

    def __init__(
        self,
        kafka: KafkaConfig,
        topic: str,
        start: str | Mapping[int, int] = "beginning",
        *,
        keep: bool = True,
    ) -> None:
        self.follower = TopicFollower(kafka, topic, start)
        self.codec = AvroCodec("io.ballast.MetricsRecord")
        self.metrics: list[Metric] = []
        self.keep = keep
        self.undecodable = 0

    def poll(self, timeout: float = 0.2) -> list[Metric]:
        """The metrics that arrived since the last call (also appended to :attr:`metrics`)."""
        new = []
        while msgs := self.follower.poll(timeout):
            for m in msgs:
                try:
                    new.append(metric_of(self.codec.decode(m.value(), m.topic(), m.partition(), m.offset())))
                except Exception as exc:  # a foreign or broken record: count it, keep reading
                    self.undecodable += 1
                    log.warning("skipping an undecodable metrics record at %s[%d]@%d: %s",
                                m.topic(), m.partition(), m.offset(), exc)  # fmt: skip
            timeout = 0.0
        if self.keep:
            self.metrics += new
        return new

    def read_to_end(self, timeout: float = 60.0) -> list[Metric]:
        """Everything up to the topic's end as it is now."""
        before = len(self.metrics)
        for m in self.follower.read_to_end(timeout):
            try:
                self.metrics.append(
                    metric_of(self.codec.decode(m.value(), m.topic(), m.partition(), m.offset()))
                )
            except Exception:
                self.undecodable += 1
        return self.metrics[before:]

    @classmethod
    def since(cls, kafka: KafkaConfig, topic: str, within_s: float, *, keep: bool = True,
              timeout: float = 30.0) -> MetricsReader:  # fmt: skip
        """A reader starting at what was published in the last ``within_s`` seconds.

        Why by time: a status or lag command wants the newest state of a deployment that may have
        published metrics for days; reading from the beginning would take longer the longer it ran.
        A partition with nothing that recent starts at its end.
        """
        from ballast.kafka.reading import offsets_at_time

        since = int(time.time() * 1000 - within_s * 1000)
        start = offsets_at_time(kafka, topic, since, "metrics-since", timeout)
        return cls(kafka, topic, start, keep=keep)

    def of(
        self, kind: type[B], source: str | None = None, prefix: str | None = None
    ) -> list[tuple[Metric, B]]:
        """The metrics read so far whose body is a ``kind``, from ``source`` (or sources starting with
        ``prefix``), in the order read, each with its envelope."""
        return [
            (m, m.body)  # type: ignore[misc]
            for m in self.metrics
            if isinstance(m.body, kind)
            and (source is None or m.source == source)
            and (prefix is None or m.source.startswith(prefix))
        ]

    def bodies(self, kind: type[B], source: str | None = None, prefix: str | None = None) -> list[B]:
        return [b for _, b in self.of(kind, source, prefix)]

    def wait_for(
        self,
        condition: Callable[[MetricsReader], object],
        timeout: float,
        what: str,
        describe: Callable[[], str] | None = None,
    ) -> None:
        """Poll until ``condition(self)`` holds (it sees every metric read so far)."""

        def holds() -> object:
            self.poll(0.2)
            return condition(self)

        wait_until(holds, timeout, what, interval=0.0, describe=describe)

    def close(self) -> None:
        self.follower.close()

    def __enter__(self) -> MetricsReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
