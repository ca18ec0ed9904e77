"""RouterMetrics: the one place the router reports what it did (totals, Prometheus, key statistics).

Why one interface (as faust keeps its monitors behind sensors): the loop, the checkpoint and the
control follower each say *what happened* (``batch(...)``, ``transaction_committed()``,
``epoch_applied(state)``) and this object decides where it is counted: the run's
:class:`RouterTotals` (tests and the CLI summary), the Prometheus registry and the interval key
statistics published to the metrics topic. Before, three sets of counters were updated side by
side at every call site and could disagree.

Why per-batch updates: a prometheus_client increment takes a lock; per record it would cost more
than routing. The loop counts in local ints and reports them once per batch.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from ballast.control.state import ControlState
from services.router.stats import IntervalStats


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class RouterTotals:
    """Counts over the whole run (tests and the CLI summary read them)."""

    offered: int = 0
    routed: int = 0
    shed: int = 0
    dead_lettered: int = 0
    markers: int = 0
    refetched: int = 0  # records seen again after a rebalance/rewind (already processed), skipped
    offset_resets: int = 0  # a record below the assignment's start: the consumer reset its position
    transactions: int = 0
    aborts: int = 0
    commit_retries: int = 0
    producer_renewals: int = 0
    control_skipped: int = 0  # control records that were no event (junk): skipped, see ballast.control.log
    epochs_applied: list[int] = field(default_factory=list)


class _Prometheus:
    """The router's collectors, in a registry of its own (several routers may share a process in tests)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
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
        self.producer_renewals = Counter(
            "ballast_router_producer_renewals",
            "Producers replaced after a fatal error that was not a fence (same transactional id)",
            lbl,
            registry=r,
        )
        self.commit_retries = Counter(
            "ballast_router_commit_retries", "Commit calls repeated after a retriable error", lbl, registry=r
        )
        self.offset_resets = Counter(
            "ballast_router_offset_resets",
            "Fetch-position resets: a record below the assigned start offset was accepted",
            lbl,
            registry=r,
        )
        self.control_skipped = Counter(
            "ballast_router_control_records_skipped",
            "Control-topic records skipped: not signed by the log's key, not a ControlEvent, or no "
            "event the log could take there",
            [*lbl, "reason"],
            registry=r,
        )
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


class RouterMetrics:
    """Everything the router counts, behind one set of calls; see the module docstring for why."""

    def __init__(
        self,
        router_id: str,
        routed_partitions: int,
        heavy_hitter_capacity: int,
        heavy_hitters_top: int,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.router_id = router_id
        self.totals = RouterTotals()
        self.registry = registry or CollectorRegistry()
        self.interval = IntervalStats(routed_partitions, heavy_hitter_capacity, heavy_hitters_top, now_ms())
        p = _Prometheus(self.registry)
        rid = router_id
        # label children resolved once: a labels() lookup per batch is wasted work
        self._in = p.records_in.labels(rid)
        self._out = p.records_out.labels(rid)
        self._shed = p.shed.labels(rid)
        self._markers = p.markers.labels(rid)
        self._transactions = p.transactions.labels(rid)
        self._aborts = p.aborts.labels(rid)
        self._commit_retries = p.commit_retries.labels(rid)
        self._producer_renewals = p.producer_renewals.labels(rid)
        self._offset_resets = p.offset_resets.labels(rid)
        self._table_size = p.table_size.labels(rid)
        self._epoch = p.epoch.labels(rid)
        self._num_workers = p.num_workers.labels(rid)
        self._batch_seconds = p.batch_seconds.labels(rid)
        # created on first use, so the exposition lists only reasons and partitions that occurred
        self._dead_family = p.dead_lettered
        self._control_skipped = p.control_skipped
        self._partition_family = p.partition_records
        self._dead: dict[str, Any] = {}
        self._partition: dict[int, Any] = {}

    def start(self, port: int, host: str = "127.0.0.1") -> None:
        """The run begins: the first statistics interval starts now; serve ``/metrics`` on
        ``host:port`` (port 0: don't). Loopback by default, as the controller's and the shedder's:
        a scrape endpoint open to every interface is the operator's choice, not ours."""
        self.interval.start_ms = now_ms()
        if port:
            start_http_server(port, addr=host, registry=self.registry)

    # --- the loop ---------------------------------------------------------------------------------

    def batch(
        self,
        worker_records: list[int],
        worker_bytes: list[int],
        keys: list[bytes],
        offered: int,
        shed: int,
        refetched: int,
        dead_reasons: dict[str, int],
        seconds: float,
        epoch: int = 0,
        resets: int = 0,
        useful_s: float | None = None,
    ) -> None:
        """One consumed batch: ``keys`` are the offered records' keys (valid key, before
        shedding); kept = ``len(keys) - shed``. ``useful_s``: the batch's time without waits on a
        full producer queue (DS2's useful time; None: all of ``seconds``)."""
        kept = len(keys) - shed
        dead = sum(dead_reasons.values()) if dead_reasons else 0
        tot = self.totals
        tot.offered += offered
        tot.routed += kept
        tot.shed += shed
        tot.dead_lettered += dead
        tot.refetched += refetched
        if resets:
            tot.offset_resets += resets
            self._offset_resets.inc(resets)
        useful = seconds if useful_s is None else max(0.0, useful_s)
        self.interval.add_batch(worker_records, worker_bytes, keys, offered, kept, dead, epoch, useful)
        self._in.inc(offered)
        self._out.inc(kept)
        if shed:
            self._shed.inc(shed)
        for reason, n in dead_reasons.items():
            child = self._dead.get(reason)
            if child is None:
                child = self._dead[reason] = self._dead_family.labels(self.router_id, reason)
            child.inc(n)
        for w, n in enumerate(worker_records):
            if n:
                child = self._partition.get(w)
                if child is None:
                    child = self._partition[w] = self._partition_family.labels(self.router_id, str(w))
                child.inc(n)
        self._batch_seconds.observe(seconds)

    def stats_record(self, epoch: int) -> dict[str, Any]:
        """The interval's ``RouterKeyStats`` MetricsRecord (codec tuple notation), to be written as
        the last record of the open transaction; the interval restarts when that commits."""
        return self.interval.render(self.router_id, epoch, now_ms())

    def discard_stats(self) -> None:
        """No partitions owned: nothing to say; a new interval starts."""
        self.interval.discard(now_ms())

    # --- control and checkpoint -------------------------------------------------------------------

    def epoch_applied(self, state: ControlState, initial: bool = False) -> None:
        """Routing switched to ``state`` (``initial``: the state the run starts from, not a change)."""
        self._epoch.set(state.epoch)
        self._table_size.set(len(state.table))
        self._num_workers.set(state.num_workers)
        if not initial:
            self.totals.epochs_applied.append(state.epoch)

    def control_record_skipped(self, record: Any) -> None:
        """The control reader skipped a record that is no event (a ``SkippedRecord``); the reader
        logged it, the controller dead-letters it."""
        self.totals.control_skipped += 1
        self._control_skipped.labels(self.router_id, record.reason).inc()

    def markers_written(self, n: int) -> None:
        self.totals.markers += n
        self._markers.inc(n)

    def committed(self, transaction: bool) -> None:
        """What was routed since the last commit is durable (``transaction``: an EOS commit)."""
        self.interval.committed()
        if transaction:
            self.totals.transactions += 1
            self._transactions.inc()

    def transaction_aborted(self) -> None:
        self.totals.aborts += 1
        self._aborts.inc()
        self.interval.aborted()

    def producer_renewed(self) -> None:
        self.totals.producer_renewals += 1
        self._producer_renewals.inc()

    def commit_retried(self) -> None:
        self.totals.commit_retries += 1
        self._commit_retries.inc()
