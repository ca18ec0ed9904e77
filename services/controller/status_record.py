"""The controller's ``ControllerStatus`` records on the metrics topic: the standby's heartbeat and
everyone's view (``ballast status``), with the Prometheus gauges updated from the same record.

Why a producer of its own: status records are not part of the control log's transactions; a
status must go out while a transaction is open, and a refused one must not abort it.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict
from typing import Any

from ballast.avro.codec import AvroCodec
from ballast.kafka.clients import make_producer
from ballast.kafka.configuration import KafkaConfig
from ballast.metrics.records import ControllerStatus, metrics_record

log = logging.getLogger(__name__)


class StatusPublisher:
    def __init__(self, kafka: KafkaConfig, controller_id: str, topic: str) -> None:
        self.id = controller_id
        self.topic = topic
        self._producer = make_producer(kafka.with_client_id(f"{controller_id}-status"))
        self._codec = AvroCodec("io.ballast.MetricsRecord")
        self.failures = 0  # status records the broker refused
        self._warned = -60.0

    def publish(self, status: ControllerStatus) -> None:
        now = int(time.time() * 1000)
        record = metrics_record(f"controller/{self.id}", now, now, "ControllerStatus", asdict(status))
        self._producer.produce(
            self.topic, self._codec.encode(record), self.id.encode(), on_delivery=self._delivered
        )
        self._producer.poll(0)

    def _delivered(self, err: Any, _msg: Any) -> None:
        """A status record the broker refused (no ACL to write metrics, say) is said, at most once a
        minute: without it, ``ballast status`` and a standby see no controller, and nothing says why."""
        if err is None:
            return
        self.failures += 1
        now = time.monotonic()
        if now >= self._warned + 60.0:
            self._warned = now
            log.warning("controller %s: status record to %s failed (%d so far): %s", self.id, self.topic,
                        self.failures, err)  # fmt: skip

    def close(self) -> None:
        self._producer.flush(5)
