"""The shedder's Prometheus endpoint: kafka-lag-exporter's lag metrics, and the shedder's own.

Why kafka-lag-exporter's names (``kafka_consumergroup_group_lag_seconds`` …): dashboards and
alerts written for it work unchanged, and an operator who knows one knows the other. The labels
are a subset of its (``group``, ``topic``, ``partition``; no ``cluster_name`` or member labels: the
shedder watches one deployment and reads groups from outside), plus ``stage`` on the shedder's own
group status. A reduce job appears as a group named by its job id (Spark commits no offsets; its
positions are its ``ReduceProgress``).

Like the controller's, the gauges are set once per cycle from what the cycle computed, so a scrape
never sees half a cycle. Loopback by default (``--metrics-host``): the endpoint has no authentication.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from prometheus_client import CollectorRegistry, Gauge, start_http_server

from services.shedder.policy import Decision
from services.shedder.policy import Status as PolicyStatus
from services.shedder.tracker import GroupLag


class ShedderGauges:
    """The shedder's collectors, in a registry of their own (tests run several in one process)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = self.registry = registry or CollectorRegistry()
        part = ["group", "topic", "partition"]
        self.offset = Gauge("kafka_consumergroup_group_offset", "Committed offset (next record read)", part,
                            registry=r)  # fmt: skip
        self.lag = Gauge(
            "kafka_consumergroup_group_lag", "Offset lag of a group on a partition", part, registry=r
        )
        self.lag_seconds = Gauge(
            "kafka_consumergroup_group_lag_seconds",
            "Time lag: age of the oldest unread record",
            part,
            registry=r,
        )
        self.max_lag = Gauge("kafka_consumergroup_group_max_lag", "Largest offset lag of a group", ["group"],
                             registry=r)  # fmt: skip
        self.max_lag_seconds = Gauge(
            "kafka_consumergroup_group_max_lag_seconds", "Largest time lag of a group", ["group"], registry=r
        )
        self.sum_lag = Gauge("kafka_consumergroup_group_sum_lag", "Offset lag of a group, summed", ["group"],
                             registry=r)  # fmt: skip
        self.topic_sum_lag = Gauge(
            "kafka_consumergroup_group_topic_sum_lag", "Offset lag of a group on a topic, summed",
            ["group", "topic"], registry=r,
        )  # fmt: skip
        self.latest_offset = Gauge(
            "kafka_partition_latest_offset",
            "Log-end offset (last stable)",
            ["topic", "partition"],
            registry=r,
        )
        self.group_status = Gauge(
            "ballast_shedder_group_status",
            "Burrow-style status of a group: 0 OK, 1 WARN, 2 STALL, 3 STOP, 4 ERR",
            ["group", "stage"],
            registry=r,
        )
        self.keep = Gauge(
            "ballast_shedder_keep_probability", "Keep-probability the shedder decided", ["topic"], registry=r
        )
        self.stream_lag = Gauge(
            "ballast_shedder_stream_lag_seconds",
            "A stream's time lag as the policy saw it",
            ["topic"],
            registry=r,
        )
        self.status = Gauge(
            "ballast_shedder_status", "1 for the last decision's status (OK, SHEDDING, LIFTING, CANNOT_HOLD)",
            ["status"], registry=r,
        )  # fmt: skip
        self.capacity = Gauge(
            "ballast_shedder_capacity_records_per_second", "Capacity the policy planned with", registry=r
        )
        self.decisions = Gauge(
            "ballast_shedder_decisions_total", "SHEDDING requests sent since start", registry=r
        )
        self.answers = Gauge(
            "ballast_shedder_requests_answered_total",
            "Answers to SHEDDING requests since start, by outcome (accepted, duplicate, refused)",
            ["outcome"],
            registry=r,
        )
        self.resent = Gauge(
            "ballast_shedder_requests_resent_total",
            "Refused SHEDDING requests sent again (decided again, after the backoff) since start",
            registry=r,
        )
        self.cycles = Gauge("ballast_shedder_cycles_total", "Policy cycles since start", registry=r)
        self.undecodable = Gauge(
            "ballast_shedder_undecodable_metrics_total",
            "Metrics records that did not decode, skipped",
            registry=r,
        )
        self.control_skipped = Gauge(
            "ballast_shedder_control_records_skipped_total",
            "Control-topic records that were no event, skipped (the controller dead-letters them)",
            ["reason"],
            registry=r,
        )

    def update_lags(self, groups: Sequence[GroupLag]) -> None:
        for g in groups:
            for p in g.partitions:
                labels = (g.group, p.topic, str(p.partition))
                self.offset.labels(*labels).set(-1 if p.committed is None else p.committed)
                self.lag.labels(*labels).set(p.lag_records)
                self.lag_seconds.labels(*labels).set(p.lag_seconds)
                self.latest_offset.labels(p.topic, str(p.partition)).set(p.end)
            worst = g.lag_seconds()
            self.max_lag.labels(g.group).set(max((p.lag_records for p in g.partitions), default=0))
            self.max_lag_seconds.labels(g.group).set(worst if not math.isnan(worst) else math.nan)
            self.sum_lag.labels(g.group).set(g.lag_records())
            for topic in {p.topic for p in g.partitions}:
                self.topic_sum_lag.labels(g.group, topic).set(g.lag_records(topic))
            self.group_status.labels(g.group, g.stage).set(int(g.status))

    def update_decision(self, decision: Decision, stream_lags: Mapping[str, float]) -> None:
        for topic, keep in decision.keep.items():
            self.keep.labels(topic).set(keep)
        for topic, lag in stream_lags.items():
            self.stream_lag.labels(topic).set(lag)
        for status in PolicyStatus:
            self.status.labels(status.value).set(1 if status is decision.status else 0)
        self.capacity.set(decision.capacity)

    def update_totals(
        self,
        cycles: int,
        decisions: int,
        answers: Mapping[str, int],
        undecodable: int,
        control_skipped: Mapping[str, int] | None = None,
        resent: int = 0,
    ) -> None:
        self.cycles.set(cycles)
        self.resent.set(resent)
        self.decisions.set(decisions)
        for outcome, n in answers.items():
            self.answers.labels(outcome).set(n)
        self.undecodable.set(undecodable)
        for reason, n in (control_skipped or {}).items():
            self.control_skipped.labels(reason).set(n)

    def serve(self, port: int, host: str = "127.0.0.1") -> None:
        """``/metrics`` on ``host:port`` in a daemon thread (prometheus_client's server)."""
        start_http_server(port, addr=host, registry=self.registry)
