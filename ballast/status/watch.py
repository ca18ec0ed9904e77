"""A running deployment watched from outside: its metrics and control log, folded into a status.

Why a class that stays open: the demo's live view and ``ballast status --watch`` redraw every
second, and re-reading the last minutes of metrics each time would cost more the longer a view
runs. The watch reads the metrics published in the last ``within_s`` seconds once, then only
what arrives (nothing is kept but the newest per source), and the control log from its newest
snapshot.
"""

from __future__ import annotations

from confluent_kafka import TopicPartition

from ballast.control.log import ControlLogReader
from ballast.control.state import initial_state
from ballast.kafka.admin import make_admin, partition_count
from ballast.kafka.clients import make_consumer
from ballast.kafka.configuration import KafkaConfig
from ballast.kafka.identities import scratch_group
from ballast.kafka.topics import TopicLayout
from ballast.metrics.reader import MetricsReader
from ballast.status.snapshot import DeploymentStatus, StatusFold


class StatusWatch:
    """The newest :class:`DeploymentStatus` of ``layout``'s deployment, on each :meth:`poll`."""

    def __init__(self, kafka: KafkaConfig, layout: TopicLayout, within_s: float = 60.0) -> None:
        self.layout = layout
        self.fold = StatusFold()
        self.metrics = MetricsReader.since(kafka, layout.name("metrics"), within_s, keep=False)
        self.control = ControlLogReader(kafka, layout.name("control"), initial_state(layout.workers))
        self.control.read_to_end()
        self._output_topic = layout.name("output")
        self._output_partitions = partition_count(make_admin(kafka), self._output_topic)
        self._ends = make_consumer(kafka, scratch_group("status"))  # asks for watermarks only

    def results_written(self) -> int:
        """Records on the output topic (high minus low watermark, summed over its partitions)."""
        total = 0
        for p in range(self._output_partitions):
            low, high = self._ends.get_watermark_offsets(TopicPartition(self._output_topic, p), timeout=10)
            total += max(0, high - low)
        return total

    def poll(self, timeout: float = 0.2) -> DeploymentStatus:
        """What arrived since the last call, folded; the status as of now."""
        self.fold.add(self.metrics.poll(timeout))
        self.control.poll(0.0)
        lay = self.layout
        return self.fold.status(lay.prefix, lay.workers, self.control.state, self.results_written())

    def close(self) -> None:
        self.metrics.close()
        self.control.close()
        self._ends.close()

    def __enter__(self) -> StatusWatch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
