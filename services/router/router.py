"""The router loop: consume input, route by ``F(k)``, hand envelopes, markers and dead letters out.

Structure (decisions in docs/router.md). The loop wires parts that each own one concern:

* :class:`~services.router.control_follower.ControlFollower` folds the control log before routing
  anything, then polls it before every batch and, while no input comes, between short slices of
  the consume() wait. A new epoch ends the open transaction: the epoch's marker is written in
  every routed partition after the records routed under the old table, and the transaction is
  committed at once, so every record routed under epoch e follows a marker e covering its input
  partition (the frontier rule, docs/router.md) and the marker is visible without waiting for the
  commit interval (the control latency, docs/router.md).
* :class:`~ballast.kafka.checkpoint.Checkpoint` (the library's) owns processed offsets,
  transactions (EOS) or flush-and-commit (ALO), abort-and-rewind and the rebalance callbacks; the
  router hands it the epoch as commit metadata (:mod:`services.router.epochs`) and learns the
  epochs earlier owners committed when partitions are assigned.
* :class:`~services.router.envelopes.EnvelopeWriter` owns what is written: envelope suffixes,
  markers, dead letters, metrics records.
* :class:`~services.router.routes.RouteCache` memoises ``RoutingTable.route`` per epoch.
* :class:`~services.router.metrics.RouterMetrics` counts (totals, Prometheus, key statistics).

Markers speak for input partitions, not for routers: each covers the input partitions its writer
owns. A marker of the current epoch is owed (and written before the next record) on every epoch
change, every assignment and after every aborted transaction. Before routing a newly assigned
partition the router catches up with the control log to the epoch its previous owner committed
with the partition's offset, so a partition's epochs never go back when it changes hands.

The Kafka clients are injected (:meth:`Router.connect` builds the real ones), so a test can drive
the loop with a recording producer and a scripted consumer.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace

from confluent_kafka import Consumer, Message, Producer, TopicPartition

from ballast.avro.wire import (
    DATA_PREFIX,
    INPUT_HEADER,
    LOW14,
    from_varint6_key,
    read_event_time,
    scan_input_event,
    uvarint,
    varint6_key,
    zigzag,
)
from ballast.control.state import ControlState
from ballast.kafka.checkpoint import Checkpoint
from ballast.kafka.clients import DeliveryTracker
from ballast.kafka.configuration import LIBRDKAFKA_MESSAGE_MAX_BYTES, KafkaConfig
from ballast.kafka.topics import TopicLayout
from ballast.routing.shedding_sample import BLOCK, Draws
from ballast.routing.table import InvalidKeyError
from services.router.clients import router_clients
from services.router.config import RouterSettings
from services.router.control_follower import ControlFollower, ControlSource
from services.router.envelopes import DLQ_HEADERS, PRODUCE_MARGIN, EnvelopeWriter, splice_bound
from services.router.epochs import committed_epoch, epoch_metadata
from services.router.errors import RouterError
from services.router.input_formats import InputError, InputParser
from services.router.metrics import RouterMetrics, RouterTotals, now_ms
from services.router.progress import EventProgress
from services.router.refusals import Refusals, consumer_error, record_limit
from services.router.routes import RouteCache

__all__ = ["DLQ_HEADERS", "Router", "RouterError", "RouterTotals"]

log = logging.getLogger("services.router")


class Router:
    """One router instance; ``run()`` blocks until :meth:`stop` (or SIGTERM via the CLI)."""

    def __init__(
        self,
        settings: RouterSettings,
        layout: TopicLayout,
        *,
        consumer: Consumer,
        producer: Producer,
        control: ControlSource,
        routed_partitions: int,
        deliveries: DeliveryTracker | None = None,
        new_producer: Callable[[], Producer] | None = None,
    ) -> None:
        """Wire the parts around the given clients; no I/O happens before :meth:`start`.

        ``control`` is a control-log reader whose ``state`` is the epoch-0 state; ``deliveries``
        is the at-least-once producer's ``on_delivery`` callback (failures stop the router);
        ``new_producer`` builds a transactional producer like ``producer`` (the checkpoint's
        ``renew_producer``: one that failed fatally without being fenced is replaced).
        """
        settings = settings.resolved(layout.prefix)  # the group and transactional.id of this deployment
        self.settings = settings
        self.layout = layout
        self.routed_partitions = routed_partitions
        self.input_topics = settings.input_topics or (layout.name("input"),)
        self.consumer = consumer
        self.producer = producer
        rid = settings.router_id
        self.metrics = RouterMetrics(
            rid, routed_partitions, settings.heavy_hitter_capacity, settings.heavy_hitters_top
        )
        # every record written (key + value + headers) fits the producer's message.max.bytes
        writable = getattr(producer, "message_max_bytes", LIBRDKAFKA_MESSAGE_MAX_BYTES) - PRODUCE_MARGIN
        self.max_record_bytes = record_limit(rid, settings.max_record_bytes, writable)
        # the hot path takes only Avro values whose envelope surely fits; larger ones are measured
        self._fast_max = splice_bound(self.max_record_bytes, rid)
        self.envelopes = EnvelopeWriter(producer, layout, rid, routed_partitions, max_bytes=writable)
        self.refusals = Refusals(self.envelopes, rid, settings.max_future_ms)
        self.progress = EventProgress(settings.progress_interval_ms / 1000)
        self.checkpoint = Checkpoint(
            consumer,
            producer,
            exactly_once=settings.exactly_once,
            commit_interval_s=settings.commit_interval_ms / 1000,
            metrics=self.metrics,
            commit_metadata=self._commit_metadata,
            on_assigned=self._assigned,
            on_rewind=self._rewound,
            before_commit=self._before_commit,
            after_commit=self.progress.committed,
            renew_producer=self._renewed_producer if new_producer is not None else None,
            deliveries=deliveries,
            name=f"router {rid}",
            commit_timeout_s=settings.commit_timeout_ms / 1000,
            commit_attempts=settings.commit_attempts,
        )
        # the highest epoch committed by earlier owners of newly assigned partitions: the loop
        # catches up with the control log to it before routing them
        self.required_epoch = 0
        self.control = ControlFollower(control)
        if hasattr(control, "on_skip"):  # a control record that is no event: counted, not fatal
            control.on_skip = self.metrics.control_record_skipped
        self.parser = InputParser(replace(settings.format_options(), max_record_bytes=self.max_record_bytes))
        self.state: ControlState = self.control.state
        self.routes = RouteCache(self.state.table, settings.route_cache_size)
        self._new_producer = new_producer
        self.ready = False  # True once the control log is folded and the consumer subscribed
        self._started = False
        self._stopping = False
        self._shed_active = False
        self._next_stats = 0.0
        self._stats_due = False
        # an idle consume() waits poll_timeout_ms in this many slices, reading the control log between
        self._slices = max(1, -(-settings.poll_timeout_ms // settings.control_poll_ms))
        self._settle_until = 0.0  # monotonic end of the short transactions after an epoch change
        self._settle_commit_s = settings.epoch_settle_commit_ms / 1000
        self._slice_s = settings.poll_timeout_ms / 1000 / self._slices
        self._apply(self.state, initial=True)

    @classmethod
    def connect(
        cls, settings: RouterSettings, layout: TopicLayout, kafka: KafkaConfig, active_workers: int = 0
    ) -> Router:
        """A router with real Kafka clients (:func:`services.router.clients.router_clients`: the
        checks against the control log's genesis come before the producer exists)."""
        settings = settings.resolved(layout.prefix)
        c = router_clients(settings, layout, kafka, active_workers)
        return cls(
            settings, layout, consumer=c.consumer, producer=c.producer, control=c.control,
            routed_partitions=c.routed_partitions, deliveries=c.deliveries, new_producer=c.new_producer,
        )  # fmt: skip

    @property
    def totals(self) -> RouterTotals:
        return self.metrics.totals

    def describe(self) -> str:
        """What this instance does, in one line (the CLI prints it first, after the bootstrap)."""
        mode = "exactly-once" if self.settings.exactly_once else "at-least-once"
        return (
            f"input {', '.join(self.input_topics)} -> {self.envelopes.routed_topic} "
            f"({self.routed_partitions} partitions), epoch {self.state.epoch}, {mode}, "
            f"group {self.settings.group_id}"
        )

    # --- lifecycle --------------------------------------------------------------------------------

    def stop(self) -> None:
        """Ask the loop to finish the open transaction and close (safe from a signal handler)."""
        self._stopping = True

    def start(self) -> None:
        """Fold the control log, subscribe, serve metrics; :meth:`run` calls it when not done yet."""
        if self._started:
            return
        self._started = True
        self._apply(self.control.start(self.settings.control_timeout_s), initial=True)
        cp = self.checkpoint
        self.consumer.subscribe(
            list(self.input_topics), on_assign=cp.on_assign, on_revoke=cp.on_revoke, on_lost=cp.on_lost
        )
        self.metrics.start(self.settings.metrics_port, self.settings.metrics_host)
        self._next_stats = time.monotonic() + self.settings.stats_interval_s
        self.ready = True

    def run(self) -> RouterTotals:
        try:
            self.start()
            while not self._stopping:
                self.step()
            if self.checkpoint.assigned:
                self._publish_stats()  # the last partial interval, in the final transaction
            self.checkpoint.commit()
        finally:
            self._close()
        return self.totals

    def _close(self) -> None:
        self.checkpoint.close()
        self.consumer.close()
        self.control.close()
        self.producer.flush(30)

    # --- the loop ---------------------------------------------------------------------------------

    def step(self) -> None:
        """One turn: follow the control log, route one consumed batch, publish and commit when due."""
        s = self.settings
        self._follow_control()
        msgs = self._poll_input()
        if self.required_epoch > self.state.epoch:
            self._catch_up(self.required_epoch)
        if msgs:
            self._begin()
            self._route_batch(msgs)
        elif (owned := self.checkpoint.assigned) and (self.envelopes.markers_due or self.progress.due(owned)):
            self._begin()  # a marker is owed, or progress not yet announced: the next commit writes it
        now = time.monotonic()
        if now >= self._next_stats:
            self._publish_stats()
        if (
            self.checkpoint.due(now)
            or self._settling_due(now)
            or (not msgs and s.commit_when_idle and self.checkpoint.is_open)
        ):
            self.checkpoint.commit()
        self.producer.poll(0)

    def _poll_input(self) -> list[Message]:
        """Up to ``batch_size`` records; with none coming, an empty list after ``poll_timeout_ms``.

        Why in slices: a consume() that finds no input blocks for its whole timeout (librdkafka
        waits for a full batch), and a control event arriving meanwhile would wait with it. So the
        wait is cut into slices of about ``control_poll_ms``, and the control log is followed
        between them. A slice that returns records ends the wait at once, so a busy input sees no
        difference; an idle one still reports "no input" only after ``poll_timeout_ms`` in all
        (what ``--commit-when-idle`` reads). A new assignment ends the wait too: the loop must
        catch up with its previous owner's epoch before it applies or announces anything.
        """
        consume = self.consumer.consume
        batch, wait = self.settings.batch_size, self._slice_s
        for _ in range(self._slices):
            msgs = consume(batch, timeout=wait)
            if msgs or self.required_epoch > self.state.epoch:
                return msgs
            self._follow_control()
        return []

    def _follow_control(self) -> None:
        """Apply what the control log says beyond the epoch routed under, and announce it at once."""
        self.control.poll()
        if self.control.state.epoch <= self.state.epoch:
            return
        before = self.state.epoch
        self._switch()
        log.info("router %s: epoch %d -> %d", self.settings.router_id, before, self.state.epoch)

    def _switch(self) -> None:
        """Route under the follower's state from now on, and make its markers visible at once.

        The epoch's markers are written now, after every record routed under the old table, and
        the interval is committed at once, with the offsets and the new epoch as their metadata:
        exactly-once, the markers are the last records of the open transaction (a new one when
        none is open); at-least-once, the offsets are committed with the new epoch first, then the
        markers are flushed and the offsets committed again. Records routed under the new table
        are written only in later intervals, so in every routed partition they follow the markers
        (the frontier rule, docs/router.md), and a transaction that aborts takes records and
        markers together (the rewind owes the markers again, at the new epoch).

        Why not a transaction of their own after committing the open one: a transaction begun
        right after a commit meets the coordinator still finishing the last one, and librdkafka
        retries its AddOffsetsToTxn only after ``retry.backoff.ms`` (100 ms) and its
        AddPartitionsToTxn after 20 ms; measured, that put 45-115 ms on every epoch change, the
        single commit 16 ms. Why not leave the markers to the commit interval, as before: the
        epoch stayed invisible for up to ``commit_interval_ms``. With no partition owned there is
        nothing to announce; the marker stays owed to the next assignment.
        """
        self._apply(self.control.state)
        self.envelopes.queue_markers()
        if self.checkpoint.assigned:
            self._begin()
            self.checkpoint.commit()
            self._settle_until = time.monotonic() + self.settings.epoch_settle_ms / 1000

    def _settling_due(self, now: float) -> bool:
        """Shortly after an epoch change, end the open transaction early.

        Why: a read_committed reader sees nothing past the first record of the oldest open
        transaction in a partition (its last stable offset). Routers notice an epoch a few
        milliseconds apart; the first to notice commits its markers and opens a transaction of new
        records in every routed partition, and the markers a later router writes behind those
        records stay invisible until that transaction ends: a whole ``commit_interval_ms``
        (measured: p99 530 ms with 4 routers under load, against 25 ms with one). So for
        ``epoch_settle_ms`` after a switch, transactions last at most ``epoch_settle_commit_ms``:
        a few more commits per epoch change, which are rare, and markers behind them wait at most
        that long.
        """
        cp = self.checkpoint
        return now < self._settle_until and cp.is_open and now - cp.opened >= self._settle_commit_s

    def _catch_up(self, epoch: int) -> None:
        """A newly assigned partition was routed under ``epoch`` by its previous owner: read the
        control log at least that far before routing it (blocks; nothing is routed meanwhile)."""
        before = self.state.epoch
        log.info(
            "router %s: catching up from epoch %d to committed epoch %d",
            self.settings.router_id, before, epoch,
        )  # fmt: skip
        self.checkpoint.commit()  # no transaction stays open while the control log is read
        self.control.catch_up(epoch, self.settings.control_timeout_s)
        self._switch()

    def _apply(self, state: ControlState, initial: bool = False) -> None:
        """Switch routing to ``state`` (route cache and envelope suffixes are per epoch)."""
        self.state = state
        self.routes = RouteCache(state.table, self.settings.route_cache_size)
        self.envelopes.set_epoch(state.epoch)
        self._shed_active = any(p < 1.0 for p in state.keep_probability.values())
        # the keep draws of this state's seeds (blocks are recomputed lazily; they are pure)
        self._draws = Draws(state.seed_for)
        self.metrics.epoch_applied(state, initial)

    def _rewound(self) -> None:
        """After an abort the consumer is back at the committed offsets and the transaction took
        the last marker (and maybe the statistics record) with it: owe both again. The event-time
        progress goes back to what the last committed interval said (its records are read again)."""
        self.envelopes.queue_markers()
        self.progress.rewind()
        self._next_stats = 0.0

    def _commit_metadata(self) -> str:
        """The epoch routed under from the committed offsets on (the next owner catches up to it)."""
        return epoch_metadata(self.state.epoch)

    def _assigned(self, committed: list[TopicPartition]) -> None:
        """New partitions: their previous owners' committed epochs must be reached before they are
        routed, and a marker covering them is owed before their first record."""
        self.required_epoch = max(self.required_epoch, committed_epoch(committed))
        self.progress.forget((tp.topic, tp.partition) for tp in committed)  # read again from here
        self.envelopes.queue_markers()

    def _begin(self) -> None:
        """Open the interval (transaction); its first records are the owed markers.

        At-least-once has no transaction to tie the markers to the offsets' epoch, so the epoch
        is committed first (flush, commit offsets with their metadata): a marker never promises
        an epoch the next owner could not learn from the committed offsets.
        """
        cp = self.checkpoint
        env = self.envelopes
        if env.markers_due and not cp.exactly_once and cp.assigned:
            cp.commit()
        cp.begin()
        if env.markers_due:
            self.metrics.markers_written(env.write_markers(now_ms(), cp.assigned, self.progress))

    def _route_batch(self, msgs: list[Message]) -> None:
        """The hot path: everything per record is inlined locals; counters are reported per batch."""
        t0 = time.perf_counter()
        producer = self.producer
        produce = producer.produce
        env = self.envelopes
        routed = env.routed_topic
        routes = self.routes
        rget = routes.get
        sget = env.suffixes.get
        hdr = INPUT_HEADER
        pre = DATA_PREFIX
        max_bytes = self.max_record_bytes
        fast_max = self._fast_max
        fast = self.settings.input_format in ("auto", "avro")
        shed_active = self._shed_active
        draws = self._draws
        dget = draws.blocks.get
        no_block = (-BLOCK - 1, ())
        wc = [0] * self.routed_partitions
        wb = [0] * self.routed_partitions
        keys: list[bytes] = []
        kappend = keys.append
        shed = refetched = resets = errors = 0
        queue_wait = 0.0
        floors = self.checkpoint.floors
        # one subscribed topic (the usual case): every record is from it, no topic() call each
        only_topic = self.input_topics[0] if len(self.input_topics) == 1 else None
        dead_reasons: dict[str, int] = {}
        next_offset = self.checkpoint.offsets
        nget = next_offset.get
        low14 = LOW14
        last_hi, last_hi_bytes = -1, b""
        keep_of: dict[str, float] = {}
        # event time: the highest per input partition (order keys of 6-byte varints, see
        # services.router.progress), and records further ahead of this router's clock than
        # --max-future-ms refused (one bad clock must not move the reduce's event time)
        progress = self.progress
        refuse, future = self.refusals.dead_letter, self.refusals.future
        hi6 = progress.key6
        h6get = hi6.get
        max_future = self.settings.max_future_ms
        future_ms = now_ms() + max_future if max_future > 0 else 1 << 62
        future6 = varint6_key(future_ms)
        if future6 < 0:
            future6 = 1 << 62
        for m in msgs:
            if m.error() is not None:
                errors += 1
                consumer_error(m)
                continue
            t = only_topic or m.topic()
            sp = m.partition()
            tp = (t, sp)
            off = m.offset()
            nxt = nget(tp)
            if nxt is None or off < nxt:
                if nxt is None or off >= floors[tp]:
                    # partition revoked during consume(), or a re-fetch of an offset processed
                    refetched += 1
                    continue
                # below where this assignment started: not a re-fetch but a reset of the fetch
                # position (the committed offset was out of range): trust what was fetched
                resets += 1
                floors[tp] = off
                log.warning(
                    "router %s: %s[%d] reset to offset %d (expected %d)",
                    self.settings.router_id, t, sp, off, nxt,
                )  # fmt: skip
            next_offset[tp] = off + 1
            v = m.value()
            if fast and v is not None and v.startswith(hdr) and len(v) <= fast_max:
                try:
                    key, ti = scan_input_event(v)
                except Exception as exc:  # BodyError; anything else is a malformed record too
                    refuse(m, exc, dead_reasons)
                    continue
                body = v[10:]
                ev = v
            else:
                try:
                    key, body = self.parser.parse(v, m.key(), m.timestamp()[1])
                except Exception as exc:  # RECORD_ERRORS; anything else is a malformed record too
                    refuse(m, exc, dead_reasons)
                    continue
                ev = hdr + body
                ti = scan_input_event(ev)[1]
                # not the hot path: measure exactly what will be produced (envelope + Kafka key)
                sfx = sget(tp) or env.suffix(t, sp)
                size = len(pre) + len(body) + len(sfx) + len(zigzag(off)) + len(key)
                if size > max_bytes:
                    exc = InputError("oversize", f"envelope + key {size} bytes > max {max_bytes}")
                    refuse(m, exc, dead_reasons)
                    continue
            # the event time: a 6-byte varint of a non-negative time is compared undecoded
            if len(ev) - ti == 6 and not ev[ti] & 1:
                k6 = int.from_bytes(ev[ti:], "little")
                if k6 > future6:
                    future(m, from_varint6_key(k6), future_ms, dead_reasons)
                    continue
                if k6 > h6get(tp, -1):
                    hi6[tp] = k6
            else:
                k6 = -1
                et = read_event_time(ev, ti)
                if et > future_ms:
                    future(m, et, future_ms, dead_reasons)
                    continue
                progress.saw(tp, et)
            p = rget(key)
            if p is None:
                try:
                    p = routes.miss(key)
                except InvalidKeyError as exc:
                    refuse(m, exc, dead_reasons)
                    continue
            kappend(key)  # the sketch counts offered load, before shedding
            if shed_active:
                keep = keep_of.get(t)
                if keep is None:
                    keep = keep_of[t] = self.state.keep_for(t)
                if keep < 1.0:
                    # the record's own draw (docs/router.md, "Shedding"): a replay keeps the same
                    # records; the draws of the next BLOCK offsets of the partition come at once
                    start, us = dget(tp, no_block)
                    i = off - start
                    if not 0 <= i < BLOCK:
                        start, us = draws.block(t, sp, off)
                        i = 0
                    if us[i] >= keep:
                        shed += 1
                        progress.shed(p, t, from_varint6_key(k6) if k6 >= 0 else et, keep)
                        continue
            sfx = sget(tp)
            if sfx is None:
                sfx = env.suffix(t, sp)
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
                # a full queue is waiting, not work: DS2's useful time leaves it out
                tq = time.perf_counter()
                producer.poll(0.05)
                env.produce(routed, out, key, p)
                queue_wait += time.perf_counter() - tq
            wc[p] += 1
            wb[p] += len(out)
        offered = len(msgs) - errors - refetched  # every other record was read (routed, shed or dead)
        seconds = time.perf_counter() - t0
        self.metrics.batch(
            wc, wb, keys, offered, shed, refetched, dead_reasons, seconds,
            self.state.epoch, resets, useful_s=seconds - queue_wait,
        )  # fmt: skip

    def _renewed_producer(self) -> Producer:
        """A new producer in place of one that failed fatally; everything that writes uses it."""
        assert self._new_producer is not None
        self.producer = self.envelopes.producer = self._new_producer()
        self.metrics.producer_renewed()
        return self.producer

    def _publish_stats(self) -> None:
        """The statistics interval is over: the record is owed as the last of this interval's
        transaction (written by :meth:`_write_stats` when the checkpoint commits)."""
        self._next_stats = time.monotonic() + self.settings.stats_interval_s
        cp = self.checkpoint
        if not cp.assigned:
            self.metrics.discard_stats()  # nothing to say: start a new interval
            self._stats_due = False
            return
        self._stats_due = True
        self._begin()  # make sure an interval is open, so a commit comes

    def _before_commit(self) -> None:
        """The interval's last writes: a progress marker set when one is owed (event time advanced
        and the progress interval passed, or records were shed), then the statistics record."""
        cp = self.checkpoint
        if cp.assigned and self.progress.due(cp.assigned):
            self.metrics.markers_written(self.envelopes.write_markers(now_ms(), cp.assigned, self.progress))
        self.progress.closing()
        self._write_stats()

    def _write_stats(self) -> None:
        if self._stats_due:
            self._stats_due = False
            self.envelopes.metrics_record(self.metrics.stats_record(self.state.epoch))
