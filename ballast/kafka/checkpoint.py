"""Checkpoint: which input offsets are processed, and when that becomes durable.

Why an object of its own (Quix Streams' ``Checkpoint`` is the model): offsets, the open
transaction, the commit (with its retry and abort-and-rewind) and the rebalance callbacks all
change the same two facts, "what has been processed" and "what is committed"; spread over a
consume→produce loop they were easy to get subtly wrong. The loop only advances
:attr:`Checkpoint.offsets` per record and asks :meth:`Checkpoint.commit` at interval ends.

Why in the library: every service that consumes, produces and commits its input offsets with
what it produced (the router, the controller) needs exactly this. What is the service's own comes
in through hooks (listed on :class:`Checkpoint`): the offset-commit metadata, what the committed
offsets say at assignment, what to write again after a rewind, the last writes of an interval,
and where commits are counted (:class:`CheckpointMetrics`).

* Offsets: a service commits the offsets of what it has *processed*, tracked per partition, not
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
* Metadata travels with the offsets (inside the transaction under exactly-once), so the next owner
  of a partition reads it in :meth:`Checkpoint.on_assign` (the router's epoch, docs/router.md). A
  partition with no committed offset gets its start (the earliest offset) at assignment, so it is
  committed, metadata and all, in the very next commit even if it stays idle.
* A commit that times out is *resumed*: librdkafka wants the call that failed repeated, not the
  sequence restarted (``send_offsets_to_transaction`` after it succeeded conflicts with the
  commit in progress).
* A producer that failed fatally without being fenced (a transaction the coordinator no longer
  knows after the member was SIGSTOPped past its session while a broker failed over:
  ``INVALID_TXN_STATE`` on the abort of ``on_lost``) is replaced by a new one with the same
  transactional id when the service gives ``renew_producer``, as Kafka Streams re-initialises its
  thread producer after losing all tasks under exactly-once v2. Fenced (another instance with the
  id is alive) or unauthorised stays fatal: renewing would fence the live instance in turn.
* A transactional call that does not return is abandoned, not waited on forever. librdkafka's
  ``send_offsets_to_transaction`` ignores its timeout when the group coordinator is down
  (librdkafka issues 5456 and 5511, open in 2.16): after a broker was killed, a router blocked in
  it for good, routed nothing and never said why (the fault campaign's stalled seeds). Each call
  runs on a helper thread and is given its own timeout plus :data:`HANG_GRACE_S`; one still running
  then counts as a fatal failure of that producer: with ``renew_producer`` a new producer with the
  same transactional id fences it (its transaction is aborted) and the consumer rewinds, without
  one the commit raises :class:`CheckpointError`. The abandoned producer is never closed under its
  blocked call (the thread keeps it alive until the call returns, if ever).
* :attr:`Checkpoint.floors` is where the current assignment (or rewind) started per partition. A
  record below it cannot be a re-fetch: the consumer reset its position (the committed offset was
  out of range, e.g. a recreated topic), so the loop trusts the fetched position.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition

from ballast.kafka.clients import DeliveryTracker

log = logging.getLogger(__name__)

WATERMARK_TIMEOUT_S = 10.0
FLUSH_TIMEOUT_S = 60.0
# more fatal producer failures than this within the window end the service: a producer that fails
# again at once is not cured by another
MAX_RENEWALS = 3
RENEWAL_WINDOW_S = 60.0
# how much longer than its own timeout a transactional call may take before it counts as hung
HANG_GRACE_S = 15.0
# fatal errors a new producer must not paper over (another live instance, or no permission)
NOT_RENEWABLE = frozenset({
    KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH,
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, KafkaError.CLUSTER_AUTHORIZATION_FAILED,
    KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED,
})  # fmt: skip


def renewable(err: KafkaError) -> bool:
    """A fatal producer error a new producer with the same transactional id recovers from."""
    return err.fatal() and err.code() not in NOT_RENEWABLE


class HungCall(KafkaException):
    """A transactional call that did not return within its timeout plus :data:`HANG_GRACE_S`."""


def bounded(call: Callable[..., Any], timeout: float, *args: Any) -> Any:
    """``call(*args)`` on a helper thread, its result or its exception; :class:`HungCall` when it
    has not returned ``timeout`` + :data:`HANG_GRACE_S` seconds later (it is left running: a call
    into librdkafka cannot be cancelled)."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append((True, call(*args)))
        except BaseException as exc:  # handed to the caller's thread
            outcome.append((False, exc))

    name = getattr(call, "__name__", "call")
    helper = threading.Thread(target=run, name=f"checkpoint-{name}", daemon=True)
    helper.start()
    helper.join(max(timeout, 0.0) + HANG_GRACE_S)
    if not outcome:
        raise HungCall(
            KafkaError(
                KafkaError._TIMED_OUT,
                f"{name} did not return within {timeout + HANG_GRACE_S:.0f} s (its timeout is "
                f"{timeout:.0f} s; librdkafka issues 5456/5511: the group coordinator went away)",
                fatal=True,
            )
        )
    ok, value = outcome[0]
    if ok:
        return value
    raise value


class CheckpointError(RuntimeError):
    """What was produced cannot be made durable with its offsets (a fatal commit error, lost
    deliveries): the service must stop rather than go on as if it were."""


class CheckpointMetrics(Protocol):
    """Where a checkpoint reports its commits (a service's metrics object satisfies it)."""

    def committed(self, transaction: bool) -> None:
        """An interval became durable (``transaction``: an exactly-once commit)."""

    def commit_retried(self) -> None:
        """A transactional call failed with a retriable error and is called again."""

    def transaction_aborted(self) -> None:
        """The open transaction was aborted; the consumer went back to the committed offsets."""


class NoMetrics:
    """Counts nothing: for a checkpoint whose service keeps no metrics (and for tests)."""

    def committed(self, transaction: bool) -> None:
        pass

    def commit_retried(self) -> None:
        pass

    def transaction_aborted(self) -> None:
        pass


def _nothing(*_args: Any) -> None:
    pass


class Checkpoint:
    """Processed offsets per owned input partition, the open interval, and committing them.

    Hooks (each optional):

    * ``commit_metadata()``: the offset-commit metadata of the next commit (None: none);
    * ``on_assigned(committed)``: after an assignment, with what the group had committed for the
      new partitions (offset < 0: nothing; ``metadata`` as committed), once :attr:`offsets` holds
      their starts;
    * ``on_rewind()``: the open transaction was dropped (or a partition lost without one): what it
      held that the service owes again (markers, statistics) must be re-queued;
    * ``before_commit()``: the interval's last writes, inside its transaction;
    * ``after_commit()``: the interval is durable (what a later rewind goes back to);
    * ``renew_producer()``: a new transactional producer with the same ``transactional.id``
      (``init_transactions`` done), for a producer that failed fatally in a way that does not say
      another instance took over (see :func:`renewable`). Without it such a failure ends the service.
    """

    def __init__(
        self,
        consumer: Consumer,
        producer: Producer,
        *,
        exactly_once: bool,
        commit_interval_s: float,
        metrics: CheckpointMetrics | None = None,
        commit_metadata: Callable[[], str | None] | None = None,
        on_assigned: Callable[[list[TopicPartition]], None] | None = None,
        on_rewind: Callable[[], None] | None = None,
        before_commit: Callable[[], None] | None = None,
        after_commit: Callable[[], None] | None = None,
        renew_producer: Callable[[], Producer] | None = None,
        deliveries: DeliveryTracker | None = None,
        name: str = "checkpoint",
        commit_timeout_s: float = 60.0,
        commit_attempts: int = 5,
    ) -> None:
        self.consumer = consumer
        self.producer = producer
        self.metrics: CheckpointMetrics = metrics or NoMetrics()
        self.exactly_once = exactly_once
        self.commit_interval_s = commit_interval_s
        # next offset to process per owned input partition (-1: no committed offset yet); the
        # loop reads and advances it directly, per record
        self.offsets: dict[tuple[str, int], int] = {}
        # where the current assignment (or the last rewind) started, per partition
        self.floors: dict[tuple[str, int], int] = {}
        self.assigned: set[tuple[str, int]] = set()
        self.in_txn = False
        self.opened = 0.0  # monotonic start of the open interval; 0: none open
        self.commit_timeout_s = commit_timeout_s
        self.commit_attempts = commit_attempts
        self._metadata = commit_metadata or (lambda: None)
        self._on_assigned: Callable[[list[TopicPartition]], None] = on_assigned or _nothing
        self._on_rewind: Callable[[], None] = on_rewind or _nothing
        self._before_commit: Callable[[], None] = before_commit or _nothing
        self._after_commit: Callable[[], None] = after_commit or _nothing
        self._renew_producer = renew_producer
        self._renewals: list[float] = []  # monotonic times of recent renewals (a loop is a defect)
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

    @property
    def is_open(self) -> bool:
        """An interval (under exactly-once, a transaction) is open: something awaits a commit."""
        return bool(self.opened)

    def positions(self) -> list[TopicPartition]:
        """Offsets to commit: the next offset to process of every owned partition, with the metadata."""
        md = self._metadata()
        extra = {} if md is None else {"metadata": md}
        return [TopicPartition(t, p, off, **extra) for (t, p), off in self.offsets.items() if off >= 0]

    def commit(self) -> None:
        """End the interval: commit the transaction (EOS) or flush and commit offsets (ALO)."""
        if self.exactly_once:
            self._commit_transaction()
        else:
            self._flush_and_commit()

    def _commit_transaction(self) -> None:
        if not self.in_txn:
            return
        self._before_commit()
        positions = self.positions()
        offsets_sent = not positions
        timeout = self.commit_timeout_s
        for attempt in range(1, self.commit_attempts + 1):
            try:
                # resume where the last attempt failed: each call is repeated, never the sequence
                if not offsets_sent:
                    metadata = self.consumer.consumer_group_metadata()
                    bounded(self.producer.send_offsets_to_transaction, timeout, positions, metadata, timeout)
                    offsets_sent = True
                bounded(self.producer.commit_transaction, timeout, timeout)
                break
            except HungCall as exc:
                log.warning("%s: %s", self._name, exc.args[0].str())
                if self._renew_producer is not None:
                    self.abort_and_rewind(failed=exc)
                    return
                raise CheckpointError(f"transaction commit failed: {exc.args[0].str()}") from exc
            except KafkaException as exc:
                err = exc.args[0]
                if err.txn_requires_abort():
                    log.warning("%s: aborting transaction: %s", self._name, err)
                    self.abort_and_rewind()
                    return
                if err.retriable() and attempt < self.commit_attempts:
                    step = "commit" if offsets_sent else "send offsets"
                    log.warning(
                        "%s: %s attempt %d/%d failed, retrying: %s",
                        self._name, step, attempt, self.commit_attempts, err,
                    )  # fmt: skip
                    self.metrics.commit_retried()
                    continue
                if self._renew_producer is not None and renewable(err):
                    self.abort_and_rewind(failed=exc)
                    return
                raise CheckpointError(f"transaction commit failed: {err}") from exc
        self.in_txn = False
        self.opened = 0.0
        self.metrics.committed(transaction=True)
        self._after_commit()

    def _flush_and_commit(self) -> None:
        self._before_commit()
        self.opened = 0.0
        remaining = self.producer.flush(FLUSH_TIMEOUT_S)
        if remaining:
            raise CheckpointError(f"{remaining} records not delivered within {FLUSH_TIMEOUT_S:.0f} s")
        if self._deliveries.failed:
            raise CheckpointError(f"delivery failed: {self._deliveries.first_error}")
        positions = self.positions()
        if positions:
            try:
                self.consumer.commit(offsets=positions, asynchronous=False)
            except KafkaException as exc:
                # e.g. a rebalance fenced this generation: the new owner replays (at least once)
                log.warning("%s: offset commit failed: %s", self._name, exc)
        self.metrics.committed(transaction=False)
        self._after_commit()

    def abort_and_rewind(self, failed: KafkaException | None = None) -> None:
        """Drop the open transaction and go back to the committed offsets (earliest when none).

        ``failed``: the producer already failed fatally (no abort is possible); a renewable fatal
        error of the abort itself is the same. The producer is then renewed: the new one's
        ``init_transactions`` aborts whatever the old one left open, so the rewind is the same."""
        if failed is None:
            try:
                self.producer.abort_transaction(self.commit_timeout_s)
            except KafkaException as exc:
                if self._renew_producer is None or not renewable(exc.args[0]):
                    raise
                failed = exc
        if failed is not None:
            self._renew(failed)
        self.in_txn = False
        self.opened = 0.0
        self.metrics.transaction_aborted()
        owned = [TopicPartition(t, p) for t, p in sorted(self.assigned)]
        if owned:
            for tp in self.consumer.committed(owned, timeout=30):
                start = tp.offset if tp.offset >= 0 else OFFSET_BEGINNING
                self.consumer.seek(TopicPartition(tp.topic, tp.partition, start))
                self.offsets[(tp.topic, tp.partition)] = tp.offset if tp.offset >= 0 else -1
                self.floors[(tp.topic, tp.partition)] = tp.offset
        # the aborted transaction took what the service wrote in it: the hook owes it again
        self._on_rewind()

    def _renew(self, failed: KafkaException) -> None:
        """A new producer in place of one that failed fatally (``renew_producer``)."""
        assert self._renew_producer is not None
        now = time.monotonic()
        self._renewals = [t for t in self._renewals if now - t < RENEWAL_WINDOW_S] + [now]
        if len(self._renewals) > MAX_RENEWALS:
            raise CheckpointError(
                f"producer failed fatally {len(self._renewals)} times within {RENEWAL_WINDOW_S:.0f} s, "
                f"last: {failed.args[0]}"
            ) from failed
        log.warning("%s: producer failed fatally (%s): a new one with the same transactional id takes over",
                    self._name, failed.args[0])  # fmt: skip
        self.producer = self._renew_producer()

    def close(self) -> None:
        """On the way out: an interval still open here was not committed; abort it (best effort)."""
        try:
            if self.in_txn:
                self.producer.abort_transaction(30)
                self.in_txn = False
        except KafkaException as exc:  # pragma: no cover - best effort on the way out
            log.warning("%s: abort on close failed: %s", self._name, exc)

    # --- rebalances (consumer callbacks; they run inside consume()) -------------------------------

    def on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if not partitions:
            return
        self.assigned |= {(tp.topic, tp.partition) for tp in partitions}
        # fetching resumes at the committed offsets: records below them were processed already
        committed = consumer.committed(partitions, timeout=30)
        for tp in committed:
            key = (tp.topic, tp.partition)
            start = tp.offset if tp.offset >= 0 else self._earliest(consumer, tp)
            self.offsets[key] = start
            self.floors[key] = start
        log.info("%s: assigned %s", self._name, sorted(self.assigned))
        self._on_assigned(committed)

    def _earliest(self, consumer: Consumer, tp: TopicPartition) -> int:
        """Where a partition without a committed offset starts (auto.offset.reset=earliest)."""
        try:
            low, _high = consumer.get_watermark_offsets(
                TopicPartition(tp.topic, tp.partition), timeout=WATERMARK_TIMEOUT_S, cached=False
            )
        except KafkaException as exc:
            raise CheckpointError(f"cannot find the start of {tp.topic}[{tp.partition}]: {exc}") from exc
        return low

    def on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # finish the interval while this generation still owns the partitions: the next owner
        # starts exactly at the committed positions
        self.commit()
        self.forget(partitions)

    def on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Partitions taken away without a revoke (session or poll interval exceeded): this
        generation may not commit any more. The open transaction is aborted; it also held records
        (and whatever else the service wrote) of partitions still owned, so those rewind and the
        ``on_rewind`` hook re-queues what is owed."""
        lost = [(tp.topic, tp.partition) for tp in partitions]
        log.warning("%s: partitions lost: %s", self._name, lost)
        self.forget(partitions)
        if self.in_txn:
            self.abort_and_rewind()
        else:
            self._on_rewind()

    def forget(self, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            self.assigned.discard((tp.topic, tp.partition))
            self.offsets.pop((tp.topic, tp.partition), None)
            self.floors.pop((tp.topic, tp.partition), None)
