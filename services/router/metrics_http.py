"""Prometheus metrics of one router, in its own registry (several routers may share a process in tests).

Why per-batch updates: a prometheus_client counter increment takes a lock; per record it would cost
more than routing. The loop counts in local ints and adds them once per batch.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server


class RouterMetrics:
    def __init__(self, router_id: str, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        lbl = ["router_id"]
        self.records_in = Counter("ballast_router_records_in", "Records consumed (offered)", lbl, registry=r)
        self.records_out = Counter("ballast_router_records_out", "Records routed (kept)", lbl, registry=r)
        self.dead_lettered = Counter(
            "ballast_router_dead_lettered",
            "Records sent to the dead-letter topic",
            [*lbl, "reason"],
            registry=r,
        )
        self.shed = Counter("ballast_router_shed", "Records dropped by shedding", lbl, registry=r)
        self.partition_records = Counter(
            "ballast_router_partition_records",
            "Records routed per partition",
            [*lbl, "partition"],
            registry=r,
        )
        self.markers = Counter("ballast_router_markers", "Epoch markers written", lbl, registry=r)
        self.transactions = Counter("ballast_router_transactions", "Transactions committed", lbl, registry=r)
        self.aborts = Counter("ballast_router_transaction_aborts", "Transactions aborted", lbl, registry=r)
        self.table_size = Gauge("ballast_router_table_size", "Routing table entries", lbl, registry=r)
        self.epoch = Gauge("ballast_router_epoch", "Current routing epoch", lbl, registry=r)
        self.num_workers = Gauge(
            "ballast_router_num_workers", "Active workers (hash modulus)", lbl, registry=r
        )
        self.batch_seconds = Histogram(
            "ballast_router_batch_seconds",
            "Time to route one consumed batch",
            lbl,
            registry=r,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
        )
        self.id = router_id

    def serve(self, port: int) -> None:
        """Expose ``/metrics`` on ``port`` (0 = do not serve)."""
        if port:
            start_http_server(port, addr="0.0.0.0", registry=self.registry)
