"""The controller's Prometheus endpoint: what an operator graphs and alerts on.

Why fed from :class:`~ballast.metrics.records.ControllerStatus` and nothing else: the status record
on the metrics topic and the scrape then say the same thing, taken at the same moment (the loop
builds one status and hands it to both), and the loop does not update collectors at every call
site. Counters that Prometheus wants monotonic (requests, decisions) are set from the controller's
running totals, so a scrape between two statuses sees the last status, never a partial pass.

Loopback by default (``--metrics-host``): the endpoint has no authentication.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Gauge, start_http_server

from ballast.metrics.records import ControllerStatus


class ControllerGauges:
    """The controller's collectors, in a registry of their own (tests run several in one process)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = self.registry = registry or CollectorRegistry()
        lbl = ["controller_id"]
        self.epoch = Gauge("ballast_controller_epoch", "Epoch of the log's last event", lbl, registry=r)
        self.workers = Gauge("ballast_controller_workers", "Hashed workers in force", lbl, registry=r)
        self.table_size = Gauge("ballast_controller_table_size", "Routing table entries", lbl, registry=r)
        self.realized = Gauge(
            "ballast_controller_realized_imbalance", "Worker load max/mean, last interval", lbl, registry=r
        )
        self.predicted = Gauge(
            "ballast_controller_predicted_imbalance", "Max/mean the last plan predicted", lbl, registry=r
        )
        self.migration_keys = Gauge(
            "ballast_controller_migration_keys", "Migration keys not installed yet", lbl, registry=r
        )
        self.migration_bytes = Gauge(
            "ballast_controller_migration_bytes", "State bytes of those keys", lbl, registry=r
        )
        self.accepted = Gauge(
            "ballast_controller_requests_accepted_total", "Requests accepted since start", lbl, registry=r
        )
        self.refused = Gauge(
            "ballast_controller_requests_refused_total",
            "Requests refused since start, by reason",
            [*lbl, "reason"],
            registry=r,
        )
        self.decisions = Gauge(
            "ballast_controller_decisions_total", "Rebalances decided since start", lbl, registry=r
        )
        self.control_skipped = Gauge(
            "ballast_controller_control_records_skipped_total",
            "Control-topic records that were no event (dead-lettered), since start, by reason",
            [*lbl, "reason"],
            registry=r,
        )

        stage = [*lbl, "stage"]
        self.instances = Gauge(
            "ballast_controller_scaling_instances", "Instances per stage as the scaling policy holds them",
            stage, registry=r,
        )  # fmt: skip
        self.optimal = Gauge(
            "ballast_controller_scaling_optimal", "DS2's optimal instances per stage, last evaluation",
            stage, registry=r,
        )  # fmt: skip
        self.true_rate = Gauge(
            "ballast_controller_scaling_true_rate", "Records per useful second of one instance, per stage",
            stage, registry=r,
        )  # fmt: skip

    def update(self, status: ControllerStatus) -> None:
        c = status.controller
        self.epoch.labels(c).set(status.epoch)
        self.workers.labels(c).set(status.workers)
        self.table_size.labels(c).set(status.table_size)
        self.realized.labels(c).set(status.realized_imbalance)
        self.predicted.labels(c).set(status.predicted_imbalance)
        self.migration_keys.labels(c).set(status.migration_keys)
        self.migration_bytes.labels(c).set(status.migration_bytes)
        self.accepted.labels(c).set(status.requests_accepted)
        for reason, n in status.requests_refused.items():
            self.refused.labels(c, reason).set(n)
        self.decisions.labels(c).set(status.decisions)
        for reason, n in status.control_records_skipped.items():
            self.control_skipped.labels(c, reason).set(n)
        if status.scaling is not None:
            for gauge, values in ((self.instances, status.scaling.instances),
                                  (self.optimal, status.scaling.optimal),
                                  (self.true_rate, status.scaling.true_rates)):  # fmt: skip
                for name, v in values.items():
                    gauge.labels(c, name).set(v)

    def serve(self, port: int, host: str = "127.0.0.1") -> None:
        """``/metrics`` on ``host:port`` in a daemon thread (prometheus_client's server)."""
        start_http_server(port, addr=host, registry=self.registry)
