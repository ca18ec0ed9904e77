"""The router loop: consume input, route by ``F(k)``, write envelopes, markers and dead letters.

Structure (decisions in docs/router.md):

* Control first. Before routing anything the router folds the whole control log; afterwards it
  polls it (non-blocking) before every batch. A new epoch is applied at a transaction boundary:
  commit the open transaction, then the next transaction starts with the epoch's markers in every
  routed partition, so every record routed under epoch e follows marker e in its partition.
* Exactly-once: one transaction per commit interval holds the routed records, markers, dead letters
  and metrics, plus the consumed positions (``send_offsets_to_transaction`` with the group metadata,
  KIP-447). An abortable error aborts and rewinds the consumer to the committed offsets.
* At-least-once: no transactions; every commit interval the producer is flushed, then offsets are
  committed synchronously. A crash replays at most one interval.
* Offsets: the router commits the offsets of what it has *processed*, tracked per partition, not
  ``consumer.position()``. A rebalance callback runs inside ``consume()``, when librdkafka may
  already have advanced the position past records that sit in the batch being built; committing
  the position there would skip them. The same table drops records at offsets below the next one
  to process (a re-fetch after a rebalance or an abort) and records of partitions no longer owned.
* Start and restart: the first transaction of every run re-writes the current epoch's markers
  (a "restart marker"), so a worker always knows the epoch of the records that follow, whichever
  instance wrote them. Markers are idempotent per (router_id, epoch).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)

from ballast.avro.codec import AvroCodec
from ballast.avro.wire import (
    DATA_PREFIX,
    INPUT_HEADER,
    LOW14,
    BodyError,
    data_suffix,
    epoch_marker,
    scan_input_body,
    uvarint,
    zigzag,
)
from ballast.control.log import ControlLogReader, ControlState
from ballast.kafka.clients import make_admin
from ballast.kafka.config import KafkaConfig
from ballast.routing.murmur2 import murmur2
from services.router.config import RouterConfig
from services.router.input_formats import InputError, InputParser
from services.router.metrics_http import RouterMetrics
from services.router.stats import IntervalStats

log = logging.getLogger("services.router")

DLQ_HEADERS = (
    "ballast.error.reason",
    "ballast.error.detail",
    "ballast.source.topic",
    "ballast.source.partition",
    "ballast.source.offset",
    "services.router.id",
)


class RouterError(RuntimeError):
    """A condition the router must not paper over (fatal Kafka error, broken control log)."""


@dataclass
class RouterTotals:
    """Counts over the whole run (tests and the CLI summary read them)."""

    offered: int = 0
    routed: int = 0
    shed: int = 0
    dead_lettered: int = 0
    markers: int = 0
    refetched: int = 0  # records seen again after a rebalance/rewind (already processed), skipped
    transactions: int = 0
    aborts: int = 0
    epochs_applied: list[int] = field(default_factory=list)


def now_ms() -> int:
    return int(time.time() * 1000)


class Router:
    """One router instance; ``run()`` blocks until :meth:`stop` (or SIGTERM via the CLI)."""

    def __init__(self, cfg: RouterConfig, kafka: KafkaConfig, metrics: RouterMetrics | None = None) -> None:
        self.cfg = cfg
        self.kafka = kafka
        self.metrics = metrics or RouterMetrics(cfg.router_id)
        self.totals = RouterTotals()
        self.parser = InputParser(cfg.format_options())
        self.metrics_codec = AvroCodec("io.ballast.MetricsRecord")
        self._stopping = False
        self._in_txn = False
        self._txn_started = 0.0
        self._route_cache: dict[bytes, int] = {}
        self._hash_cache: dict[bytes, int] = {}
        self._suffixes: dict[tuple[str, int], bytes] = {}
        self._pending_markers: list[int] = []
        self._assigned: set[tuple[str, int]] = set()
        # next offset to process per owned input partition (-1: no committed offset yet)
        self._next_offset: dict[tuple[str, int], int] = {}
        self._rng = random.Random(cfg.shed_seed or None)
        self.ready = False  # True once the control log is folded and the consumer subscribed
        self.state: ControlState
        self.consumer: Consumer
        self.producer: Producer
        self.control: ControlLogReader

    # --- lifecycle ------------------------------------------------------------------------------

    def stop(self) -> None:
        """Ask the loop to finish the open transaction and close (safe from a signal handler)."""
        self._stopping = True

    def _partitions(self, topic: str, timeout: float = 15.0) -> int:
        """Partition count of ``topic``; waits briefly, as a just-created topic can be listed
        without partitions until its metadata reaches the broker that answers."""
        admin = make_admin(self.kafka)
        deadline = time.monotonic() + timeout
        while True:
            meta = admin.list_topics(topic, timeout=30).topics.get(topic)
            if meta is not None and meta.error is None and meta.partitions:
                return len(meta.partitions)
            if time.monotonic() > deadline:
                raise RouterError(f"topic {topic} does not exist (run `ballast topics create`)")
            time.sleep(0.2)

    def _setup(self) -> None:
        cfg = self.cfg
        self.n_routed = self._partitions(cfg.routed_topic)
        initial = ControlState(num_workers=cfg.workers or self.n_routed, max_workers=self.n_routed)
        self.control = ControlLogReader(self.kafka, cfg.control_topic, initial)
        self.control.read_to_end()
        self._apply_state(self.control.state, initial=True)
        pconf: dict[str, object] = {"client.id": f"{cfg.router_id}-producer"}
        if cfg.exactly_once:
            pconf["transactional.id"] = cfg.transactional_id
        else:
            # delivery reports only for failures: no Python callback per record
            pconf["on_delivery"] = self._on_delivery
            pconf["delivery.report.only.error"] = True
        self.producer = Producer(self.kafka.producer(**pconf))
        if cfg.exactly_once:
            # fences a zombie with the same id and aborts its open transaction
            self.producer.init_transactions(60)
        cconf: dict[str, object] = {
            "client.id": f"{cfg.router_id}-consumer",
            "session.timeout.ms": cfg.session_timeout_ms,
        }
        if cfg.static_membership:
            cconf["group.instance.id"] = cfg.router_id
        self.consumer = Consumer(self.kafka.consumer(cfg.group_id, **cconf))
        self.consumer.subscribe(
            list(cfg.input_topics),
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_lost,
        )
        self.stats = IntervalStats(self.n_routed, cfg.heavy_hitter_capacity, cfg.heavy_hitters_top, now_ms())
        self._next_stats = time.monotonic() + cfg.stats_interval_s
        self._pending_markers = [self.state.epoch]
        self.metrics.serve(cfg.metrics_port)
        self.ready = True

    def run(self) -> RouterTotals:
        self._setup()
        try:
            while not self._stopping:
                self._step()
            if self._assigned:
                self._publish_stats()  # the last partial interval, in the final transaction
            self._commit()
        finally:
            self._close()
        return self.totals

    def _close(self) -> None:
        try:
            if self._in_txn:
                self.producer.abort_transaction(30)
                self._in_txn = False
        except KafkaException as exc:  # pragma: no cover - best effort on the way out
            log.warning("abort on close failed: %s", exc)
        self.consumer.close()
        self.control.close()
        self.producer.flush(30)

    # --- control ----------------------------------------------------------------------------------

    def _apply_state(self, state: ControlState, initial: bool = False) -> None:
        """Switch routing to ``state`` (caches are per epoch)."""
        self.state = state
        self._entries = {k.encode(): w for k, w in state.table.items()}
        self._route_cache = {}
        self._suffixes = {}
        self._keep = dict(state.keep_probability)
        self._shed_active = any(p < 1.0 for p in self._keep.values())
        m = self.metrics
        rid = self.cfg.router_id
        m.epoch.labels(rid).set(state.epoch)
        m.table_size.labels(rid).set(len(state.table))
        m.num_workers.labels(rid).set(state.num_workers)
        if not initial:
            self.totals.epochs_applied.append(state.epoch)

    def _poll_control(self) -> None:
        before = self.state.epoch
        try:
            events = self.control.poll(0)
        except Exception as exc:
            raise RouterError(f"control log: {exc}") from exc
        if not events:
            return
        # epochs are applied at a transaction boundary: what was routed so far used the old table
        self._commit()
        self._apply_state(self.control.state)
        self._pending_markers.extend(int(e["epoch"]) for e in events if int(e["epoch"]) > before)
        log.info("router %s: epoch %d -> %d", self.cfg.router_id, before, self.state.epoch)

    def _write_markers(self) -> None:
        t = now_ms()
        produce = self.producer.produce
        rid = self.cfg.router_id
        for epoch in self._pending_markers:
            for w in range(self.n_routed):
                self._produce(
                    lambda e=epoch, w=w: produce(
                        self.cfg.routed_topic, epoch_marker(e, rid, w, t), partition=w
                    )
                )
        n = len(self._pending_markers) * self.n_routed
        self.totals.markers += n
        self.metrics.markers.labels(rid).inc(n)
        self._pending_markers = []

    # --- transactions / commits ---------------------------------------------------------------------

    def _ensure_txn(self) -> None:
        if self.cfg.exactly_once and not self._in_txn:
            self.producer.begin_transaction()
            self._in_txn = True
            self._txn_started = time.monotonic()
        elif not self.cfg.exactly_once and not self._txn_started:
            self._txn_started = time.monotonic()
        if self._pending_markers:
            self._write_markers()

    def _positions(self) -> list[TopicPartition]:
        """Offsets to commit: the next offset to process of every owned partition."""
        return [TopicPartition(t, p, off) for (t, p), off in self._next_offset.items() if off >= 0]

    def _commit(self) -> None:
        """End the interval: commit the transaction (EOS) or flush and commit offsets (ALO)."""
        if self.cfg.exactly_once:
            if not self._in_txn:
                return
            for attempt in range(5):
                try:
                    positions = self._positions()
                    if positions:
                        self.producer.send_offsets_to_transaction(
                            positions, self.consumer.consumer_group_metadata(), 30
                        )
                    self.producer.commit_transaction(60)
                    break
                except KafkaException as exc:
                    err = exc.args[0]
                    if err.txn_requires_abort():
                        log.warning("router %s: aborting transaction: %s", self.cfg.router_id, err)
                        self._abort_and_rewind()
                        return
                    if err.retriable() and attempt < 4:
                        continue
                    raise RouterError(f"transaction commit failed: {err}") from exc
            self._in_txn = False
            self.totals.transactions += 1
            self.metrics.transactions.labels(self.cfg.router_id).inc()
        else:
            self._txn_started = 0.0
            remaining = self.producer.flush(60)
            if remaining:
                raise RouterError(f"{remaining} records not delivered within 60 s")
            if self._delivery_error is not None:
                raise RouterError(f"delivery failed: {self._delivery_error}")
            positions = self._positions()
            if positions:
                try:
                    self.consumer.commit(offsets=positions, asynchronous=False)
                except KafkaException as exc:
                    # e.g. a rebalance fenced this generation: the new owner replays (at least once)
                    log.warning("offset commit failed: %s", exc)

    _delivery_error: KafkaError | None = None

    def _on_delivery(self, err: KafkaError | None, _msg: object) -> None:
        if err is not None and self._delivery_error is None:
            self._delivery_error = err

    def _abort_and_rewind(self) -> None:
        self.producer.abort_transaction(60)
        self._in_txn = False
        self.totals.aborts += 1
        self.metrics.aborts.labels(self.cfg.router_id).inc()
        assignment = self.consumer.assignment()
        if assignment:
            for tp in self.consumer.committed(assignment, timeout=30):
                self.consumer.seek(
                    TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_BEGINNING)
                )
                self._next_offset[(tp.topic, tp.partition)] = tp.offset if tp.offset >= 0 else -1
        self._pending_markers = [self.state.epoch]

    # --- rebalances -------------------------------------------------------------------------------

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._assigned |= {(tp.topic, tp.partition) for tp in partitions}
        # fetching resumes at the committed offsets: records below them were processed already
        for tp in consumer.committed(partitions, timeout=30):
            self._next_offset[(tp.topic, tp.partition)] = tp.offset if tp.offset >= 0 else -1
        log.info("router %s: assigned %s", self.cfg.router_id, sorted(self._assigned))

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # finish the interval while this generation still owns the partitions: the next owner
        # starts exactly at the committed positions
        self._commit()
        self._forget(partitions)

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if self._in_txn:
            self.producer.abort_transaction(60)
            self._in_txn = False
        self._forget(partitions)

    def _forget(self, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            self._assigned.discard((tp.topic, tp.partition))
            self._next_offset.pop((tp.topic, tp.partition), None)

    # --- the loop ---------------------------------------------------------------------------------

    def _step(self) -> None:
        cfg = self.cfg
        self._poll_control()
        msgs = self.consumer.consume(cfg.batch_size, timeout=cfg.poll_timeout_ms / 1000)
        if msgs:
            t0 = time.perf_counter()
            self._ensure_txn()
            self._route_batch(msgs)
            self.metrics.batch_seconds.labels(cfg.router_id).observe(time.perf_counter() - t0)
        elif self._pending_markers and self._assigned:
            self._ensure_txn()
        if time.monotonic() >= self._next_stats:
            self._publish_stats()
        if self._txn_started and time.monotonic() - self._txn_started >= cfg.commit_interval_ms / 1000:
            self._commit()
        self.producer.poll(0)

    def _produce(self, call: Callable[[], None]) -> None:
        while True:
            try:
                call()
                return
            except BufferError:
                self.producer.poll(0.05)

    def _route_miss(self, key: bytes) -> int:
        """Route a key not in the cache; -1 = not UTF-8, -2 = empty."""
        if not key:
            return -2
        try:
            key.decode("utf-8")
        except UnicodeDecodeError:
            return -1
        w = self._entries.get(key)
        if w is None:
            h = self._hash_cache.get(key)
            if h is None:
                h = murmur2(key) & 0x7FFFFFFF
                if len(self._hash_cache) >= self.cfg.route_cache_size:
                    self._hash_cache.clear()
                self._hash_cache[key] = h
            w = h % self.state.num_workers
        if len(self._route_cache) >= self.cfg.route_cache_size:
            self._route_cache.clear()
        self._route_cache[key] = w
        return w

    def _suffix(self, topic: str, partition: int) -> bytes:
        s = data_suffix(self.state.epoch, self.cfg.router_id, topic, partition)
        self._suffixes[(topic, partition)] = s
        return s

    def _route_batch(self, msgs: list) -> None:
        """The hot path: everything per record is inlined locals; counters are added per batch."""
        producer = self.producer
        produce = producer.produce
        routed = self.cfg.routed_topic
        rget = self._route_cache.get
        sget = self._suffixes.get
        hdr = INPUT_HEADER
        pre = DATA_PREFIX
        max_bytes = self.cfg.max_record_bytes
        fast = self.cfg.input_format in ("auto", "avro")
        shed_active = self._shed_active
        n_routed = self.n_routed
        wc = [0] * n_routed
        wb = [0] * n_routed
        keys: list[bytes] = []
        kappend = keys.append
        offered = shed = dead = refetched = 0
        dead_reasons: dict[str, int] = {}
        next_offset = self._next_offset
        nget = next_offset.get
        low14 = LOW14
        last_hi, last_hi_bytes = -1, b""
        for m in msgs:
            if m.error() is not None:
                self._consumer_error(m)
                continue
            t = m.topic()
            sp = m.partition()
            tp = (t, sp)
            off = m.offset()
            nxt = nget(tp)
            if nxt is None or off < nxt:
                # partition revoked during consume(), or a re-fetch of an offset already processed
                refetched += 1
                continue
            next_offset[tp] = off + 1
            offered += 1
            v = m.value()
            if fast and v is not None and v.startswith(hdr) and len(v) <= max_bytes:
                try:
                    key = scan_input_body(v)
                except BodyError as exc:
                    self._dead_letter(m, exc.reason, exc.detail, dead_reasons)
                    dead += 1
                    continue
                body = v[10:]
            else:
                try:
                    key, body = self.parser.parse(v, m.key(), m.timestamp()[1])
                except InputError as exc:
                    self._dead_letter(m, exc.reason, exc.detail, dead_reasons)
                    dead += 1
                    continue
            p = rget(key)
            if p is None:
                p = self._route_miss(key)
                if p < 0:
                    self._dead_letter(
                        m,
                        "missing-key" if p == -2 else "malformed",
                        "empty key" if p == -2 else "key is not UTF-8",
                        dead_reasons,
                    )
                    dead += 1
                    continue
            if shed_active:
                keep = self._keep_for(m.topic())
                if keep < 1.0 and self._rng.random() >= keep:
                    shed += 1
                    continue
            sfx = sget(tp)
            if sfx is None:
                sfx = self._suffix(t, sp)
            # source_offset as an Avro long, inlined: low 14 bits from a table, the rest cached
            # while the batch walks consecutive offsets (same bytes as zigzag(off), without the loop)
            z = off << 1
            if z < 0x4000:
                out = pre + body + sfx + zigzag(off)
            else:
                hi = z >> 14
                if hi != last_hi:
                    last_hi, last_hi_bytes = hi, uvarint(hi)
                out = pre + body + sfx + low14[z & 0x3FFF] + last_hi_bytes
            try:
                produce(routed, out, key, p)  # positional: no keyword parsing per record
            except BufferError:
                producer.poll(0.05)
                self._produce(lambda out=out, key=key, p=p: produce(routed, out, key, p))
            wc[p] += 1
            wb[p] += len(out)
            kappend(key)
        kept = len(keys)
        tot = self.totals
        tot.offered += offered
        tot.routed += kept
        tot.shed += shed
        tot.dead_lettered += dead
        tot.refetched += refetched
        self.stats.add_batch(wc, wb, keys, offered, kept, dead)
        mt = self.metrics
        rid = self.cfg.router_id
        mt.records_in.labels(rid).inc(offered)
        mt.records_out.labels(rid).inc(kept)
        if shed:
            mt.shed.labels(rid).inc(shed)
        for reason, n in dead_reasons.items():
            mt.dead_lettered.labels(rid, reason).inc(n)
        for w, n in enumerate(wc):
            if n:
                mt.partition_records.labels(rid, str(w)).inc(n)

    def _keep_for(self, topic: str) -> float:
        kp = self._keep
        return kp.get(topic, kp.get("*", 1.0))

    def _consumer_error(self, m) -> None:
        err = m.error()
        if err.code() == KafkaError._PARTITION_EOF:
            return
        if err.fatal():
            raise RouterError(f"fatal consumer error: {err}")
        log.warning("consumer error: %s", err)

    def _dead_letter(self, m, reason: str, detail: str, reasons: dict[str, int]) -> None:
        """Original key and value, unchanged; the why and where in headers (same transaction)."""
        headers = [
            ("ballast.error.reason", reason.encode()),
            ("ballast.error.detail", detail[:1000].encode("utf-8", "replace")),
            ("ballast.source.topic", m.topic().encode()),
            ("ballast.source.partition", str(m.partition()).encode()),
            ("ballast.source.offset", str(m.offset()).encode()),
            ("services.router.id", self.cfg.router_id.encode()),
        ]
        value, key = m.value(), m.key()
        topic = self.cfg.dead_letter_topic
        self._produce(lambda: self.producer.produce(topic, value=value, key=key, headers=headers))
        reasons[reason] = reasons.get(reason, 0) + 1

    def _publish_stats(self) -> None:
        cfg = self.cfg
        self._next_stats = time.monotonic() + cfg.stats_interval_s
        if cfg.exactly_once and not self._in_txn:
            if not self._assigned:
                self.stats.snapshot(cfg.router_id, self.state.epoch, now_ms())  # nothing to say
                return
            self._ensure_txn()
        record = self.stats.snapshot(cfg.router_id, self.state.epoch, now_ms())
        value = self.metrics_codec.encode(record)
        self._produce(
            lambda: self.producer.produce(cfg.metrics_topic, value=value, key=cfg.router_id.encode())
        )
