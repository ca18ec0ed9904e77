"""Checkpoint: which input offsets are processed, and when that becomes durable.

Why an object of its own (Quix Streams' ``Checkpoint`` is the model): offsets, the open
transaction, the commit (with its retry and abort-and-rewind) and the rebalance callbacks all
change the same two facts, "what has been processed" and "what is committed"; spread over the
loop they were easy to get subtly wrong. The loop only advances :attr:`Checkpoint.offsets` per
record and asks :meth:`commit` at interval ends.

* Offsets: the router commits the offsets of what it has *processed*, tracked per partition, not
  ``consumer.position()``. A rebalance callback runs inside ``consume()``, when librdkafka may
  already have advanced the position past records that sit in the batch being built; committing
  the position there would skip them. The same table lets the loop drop records at offsets below
  the next one to process (a re-fetch after a rebalance or an abort) and records of partitions no
  longer owned.
* Exactly-once: one transaction per commit interval holds everything produced plus the processed
  positions (``send_offsets_to_transaction`` with the group metadata, KIP-447). An abortable error
  aborts and rewinds the consumer to the committed offsets.
* At-least-once: no transactions; at the end of each interval the producer is flushed, then offsets
  are committed synchronously. A crash replays at most one interval.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition

from ballast.kafka.clients import DeliveryTracker
from services.router.errors import RouterError
from services.router.metrics import RouterMetrics

log = logging.getLogger(__name__)

COMMIT_ATTEMPTS = 5


class Checkpoint:
    """Processed offsets per owned input partition, the open interval, and committing them."""

    def __init__(
        self,
        consumer: Consumer,
        producer: Producer,
        metrics: RouterMetrics,
        *,
        exactly_once: bool,
        commit_interval_s: float,
        on_rewind: Callable[[], None] | None = None,
        deliveries: DeliveryTracker | None = None,
        name: str = "router",
    ) -> None:
        self.consumer = consumer
        self.producer = producer
        self.metrics = metrics
        self.exactly_once = exactly_once
        self.commit_interval_s = commit_interval_s
        # next offset to process per owned input partition (-1: no committed offset yet); the
        # loop reads and advances it directly, per record
        self.offsets: dict[tuple[str, int], int] = {}
        self.assigned: set[tuple[str, int]] = set()
        self.in_txn = False
        self.opened = 0.0  # monotonic start of the open interval; 0: none open
        self._on_rewind = on_rewind or (lambda: None)
        # failures reported by the producer's delivery callback (at-least-once only)
        self._deliveries = deliveries or DeliveryTracker()
        self._name = name

    # --- intervals --------------------------------------------------------------------------------

    def begin(self) -> None:
        """Open an interval (and, exactly-once, its transaction) unless one is open."""
        if self.exactly_once:
            if not self.in_txn:
                self.producer.begin_transaction()
                self.in_txn = True
                self.opened = time.monotonic()
        elif not self.opened:
            self.opened = time.monotonic()

    def due(self, now: float) -> bool:
        """The open interval has lasted the commit interval."""
        return bool(self.opened) and now - self.opened >= self.commit_interval_s

    def positions(self) -> list[TopicPartition]:
        """Offsets to commit: the next offset to process of every owned partition."""
        return [TopicPartition(t, p, off) for (t, p), off in self.offsets.items() if off >= 0]

    def commit(self) -> None:
        """End the interval: commit the transaction (EOS) or flush and commit offsets (ALO)."""
        if self.exactly_once:
            self._commit_transaction()
        else:
            self._flush_and_commit()

    def _commit_transaction(self) -> None:
        if not self.in_txn:
            return
        for attempt in range(COMMIT_ATTEMPTS):
            try:
                positions = self.positions()
                if positions:
                    self.producer.send_offsets_to_transaction(
                        positions, self.consumer.consumer_group_metadata(), 30
                    )
                self.producer.commit_transaction(60)
                break
            except KafkaException as exc:
                err = exc.args[0]
                if err.txn_requires_abort():
                    log.warning("router %s: aborting transaction: %s", self._name, err)
                    self.abort_and_rewind()
                    return
                if err.retriable() and attempt < COMMIT_ATTEMPTS - 1:
                    continue
                raise RouterError(f"transaction commit failed: {err}") from exc
        self.in_txn = False
        self.opened = 0.0
        self.metrics.transaction_committed()

    def _flush_and_commit(self) -> None:
        self.opened = 0.0
        remaining = self.producer.flush(60)
        if remaining:
            raise RouterError(f"{remaining} records not delivered within 60 s")
        if self._deliveries.failed:
            raise RouterError(f"delivery failed: {self._deliveries.first_error}")
        positions = self.positions()
        if positions:
            try:
                self.consumer.commit(offsets=positions, asynchronous=False)
            except KafkaException as exc:
                # e.g. a rebalance fenced this generation: the new owner replays (at least once)
                log.warning("offset commit failed: %s", exc)

    def abort_and_rewind(self) -> None:
        """Drop the open transaction and go back to the committed offsets (earliest when none)."""
        self.producer.abort_transaction(60)
        self.in_txn = False
        self.opened = 0.0
        self.metrics.transaction_aborted()
        assignment = self.consumer.assignment()
        if assignment:
            for tp in self.consumer.committed(assignment, timeout=30):
                start = tp.offset if tp.offset >= 0 else OFFSET_BEGINNING
                self.consumer.seek(TopicPartition(tp.topic, tp.partition, start))
                self.offsets[(tp.topic, tp.partition)] = tp.offset if tp.offset >= 0 else -1
        self._on_rewind()

    def close(self) -> None:
        """On the way out: an interval still open here was not committed; abort it (best effort)."""
        try:
            if self.in_txn:
                self.producer.abort_transaction(30)
                self.in_txn = False
        except KafkaException as exc:  # pragma: no cover - best effort on the way out
            log.warning("abort on close failed: %s", exc)

    # --- rebalances (consumer callbacks; they run inside consume()) -------------------------------

    def on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.assigned |= {(tp.topic, tp.partition) for tp in partitions}
        # fetching resumes at the committed offsets: records below them were processed already
        for tp in consumer.committed(partitions, timeout=30):
            self.offsets[(tp.topic, tp.partition)] = tp.offset if tp.offset >= 0 else -1
        log.info("router %s: assigned %s", self._name, sorted(self.assigned))

    def on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # finish the interval while this generation still owns the partitions: the next owner
        # starts exactly at the committed positions
        self.commit()
        self.forget(partitions)

    def on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if self.in_txn:
            self.producer.abort_transaction(60)
            self.in_txn = False
            self.opened = 0.0
        self.forget(partitions)

    def forget(self, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            self.assigned.discard((tp.topic, tp.partition))
            self.offsets.pop((tp.topic, tp.partition), None)
