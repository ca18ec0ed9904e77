"""``ballast shedder run``'s work, without faust: what one sample, one metrics record and one cycle do.

* **A metrics record** (:meth:`Shedder.on_metric`): a ``ReduceProgress`` becomes its job's position
  on the routed topic (its ``end_offsets``) and proof the job is alive. A record that does not
  decode is counted and logged, never raised: metrics are observations, and one bad record must not
  stop the reader of all the others (the same rule as :class:`~ballast.metrics.reader.MetricsReader`;
  metrics have no dead-letter topic, their producers own them).
* **A sample** (:meth:`Shedder.sample`): the routers' committed offsets, then every partition's log
  end, into the :class:`~services.shedder.tracker.LagTracker`; each reduce job judged at its latest
  progress.
* **A cycle** (:meth:`Shedder.cycle`): the control log folded to now (the keeps in force), the
  streams observed (:mod:`services.shedder.observations`), the policy asked, and for each change a
  ``SHEDDING`` request with the id :func:`~services.shedder.keeps.request_id` derives, so a resend
  is answered from the controller's memory, never applied twice (:mod:`services.shedder.keeps`).
  A refused request is sent again, under its id, when a later cycle decides it again, after a
  backoff (:mod:`services.shedder.outbox`). The cycle returns the ``LagSample`` records to publish.

Why it blocks: every Kafka client here is confluent-kafka's (the AdminClient, the control log reader,
the control client), whose calls block. :mod:`services.shedder.run` runs :meth:`sample` and
:meth:`cycle` in one worker thread, off faust's event loop, one at a time, so this class needs no
lock: the only things the event loop writes (:attr:`progress`, :attr:`batches`) are replaced whole,
never mutated.
"""

from __future__ import annotations

import logging
import math
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from ballast.avro.codec import AvroCodec
from ballast.control.log import ControlLogReader
from ballast.control.requests import ControlClient
from ballast.control.state import initial_state
from ballast.kafka.admin import make_admin, partition_count
from ballast.kafka.configuration import KafkaConfig
from ballast.kafka.topics import TopicLayout
from ballast.metrics.records import ReduceProgress, metric_of, metrics_record
from services.shedder.capacity import (
    BatchCost,
    CostModel,
    batch_cost,
    job_capacity,
    pipeline_capacity,
    with_batch,
)
from services.shedder.config import PolicySettings, ShedderSettings, StreamDeclaration
from services.shedder.keeps import KeepsInForce, request_id
from services.shedder.observations import observe_streams
from services.shedder.outbox import Outbox, Send, max_wait_cycles
from services.shedder.policy import Decision, SheddingPolicy, Status
from services.shedder.prometheus import ShedderGauges
from services.shedder.sampling import OffsetSampler
from services.shedder.tracker import REDUCE, ROUTER, GroupLag, LagTracker

log = logging.getLogger("services.shedder")


class Shedder:
    """One shedder instance (see the module docstring). ``wall_clock``: the calendar (seconds) for
    what it stamps (LagSamples, requests' ``issued_at``); nothing it decides reads it."""

    def __init__(
        self,
        kafka: KafkaConfig,
        layout: TopicLayout,
        settings: ShedderSettings,
        policy: PolicySettings,
        streams: Sequence[StreamDeclaration],
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.kafka = kafka
        self.wall_clock = wall_clock
        self.layout = layout
        settings = settings.resolved(layout.prefix)  # its id and the routers' group of this deployment
        self.settings = settings
        self.policy_settings = policy
        self.streams = tuple(streams)
        self.id = settings.shedder_id
        self.routed_topic = layout.name("routed")
        self.tracker = LagTracker(
            settings.status_rules(),
            settings.table_capacity,
            tau_s=settings.rate_tau_s,
            rate_interval_s=settings.rate_interval_s,
            arrival_tau_s=settings.arrival_tau_s,
        )
        self.policy = SheddingPolicy(policy, self.streams)
        self.keeps = KeepsInForce()
        self.codec = AvroCodec("io.ballast.MetricsRecord")
        self.gauges = ShedderGauges()
        # job -> (its latest progress, time.monotonic() when it arrived); replaced whole by on_metric
        self.progress: dict[str, tuple[ReduceProgress, float]] = {}
        # job -> its recent batches' rows and busy time (the capacity); replaced whole by on_metric
        self.batches: dict[str, tuple[BatchCost, ...]] = {}
        self._cost_models: dict[str, CostModel | None] = {}  # job -> its last good cost fit (cycle thread)
        self.undecodable = 0
        self.cycles = 0
        self.decisions = 0
        self.answers: Counter[str] = Counter()
        self.resent = 0  # refused requests sent again
        self.last_decision: Decision | None = None
        self.groups: list[GroupLag] = []
        self._previous_lags: dict[str, float] = {}
        self._last_cycle: tuple[float, int] | None = None  # (monotonic, wall ms) of the last cycle
        self._sampled_ms = 0  # wall clock of the last sample
        self.outbox = Outbox(max_wait_cycles(settings.resend_max_s, policy.cycle_s))
        self.reader: ControlLogReader | None = None
        self.client: ControlClient | None = None
        self.sampler: OffsetSampler | None = None

    # --- start and stop ---------------------------------------------------------------------------

    def connect(self, timeout: float = 60.0) -> None:
        """Fold the control log (the keeps in force before any decision), open the clients."""
        routed = partition_count(make_admin(self.kafka), self.routed_topic)
        self.reader = ControlLogReader(self.kafka, self.layout.name("control"), initial_state(routed))
        self.keeps.apply(self.reader.read_to_end(timeout))
        if not self.settings.dry_run:
            self.client = ControlClient(self.kafka, self.layout, self.id, clock=self.wall_clock)
        self.sampler = OffsetSampler(
            self.kafka.with_client_id(self.id),
            [s.topic for s in self.streams],
            self.settings.router_group,
            other_topics=[self.routed_topic],
        )
        if self.settings.metrics_port:
            self.gauges.serve(self.settings.metrics_port, self.settings.metrics_host)

    def close(self) -> None:
        for closer in (self.reader, self.client, self.sampler):
            if closer is not None:
                try:
                    closer.close()
                except Exception as exc:  # on the way out: say it, do not mask the exit
                    log.warning("shedder %s: closing: %s", self.id, exc)

    # --- metrics in -------------------------------------------------------------------------------

    def on_metric(self, value: bytes | None, where: str = "") -> None:
        """One record of the metrics topic (on faust's event loop: quick, no I/O)."""
        try:
            metric = metric_of(self.codec.decode(value))
        except Exception as exc:  # not Avro, another schema, a broken union: count, log, go on
            self.undecodable += 1
            log.warning("shedder %s: skipping an undecodable metrics record %s: %s", self.id, where, exc)
            return
        body = metric.body
        if isinstance(body, ReduceProgress):
            jobs = self.settings.jobs()
            if not jobs or body.job in jobs:
                now = time.monotonic()
                self.progress = {**self.progress, body.job: (body, now)}
                cost = batch_cost(body.batch_id, body.input_rows, body.durations_ms, now)
                if cost is not None:
                    window = self.settings.capacity_window_s
                    history = with_batch(self.batches.get(body.job, ()), cost, window)
                    self.batches = {**self.batches, body.job: history}

    # --- a sample ---------------------------------------------------------------------------------

    def sample(self) -> list[GroupLag]:
        """Offsets read and judged (blocking); the groups as they are now."""
        assert self.sampler is not None
        s = self.sampler.sample()
        for error in s.errors:
            log.warning("shedder %s: %s", self.id, error)
        now = s.ended_at
        # the LagSamples say when this was measured (wall clock), not when the cycle published them
        self._sampled_ms = int(self.wall_clock() * 1000 - (time.monotonic() - now) * 1000)
        self.tracker.observe_ends(now, s.ends, s.log_starts)
        router = self.tracker.observe_group(self.settings.router_group, ROUTER, now, s.committed)
        routed = [tp for tp in s.ends if tp[0] == self.routed_topic]
        groups = [router]
        for job, (progress, received) in sorted(self.progress.items()):
            positions = {
                tp: progress.end_offsets[tp[1]] if tp[1] < len(progress.end_offsets) else None
                for tp in routed
            }
            groups.append(self.tracker.observe_group(job, REDUCE, now, positions, routed, received))
        self.groups = groups
        return groups

    # --- a cycle ----------------------------------------------------------------------------------

    def cycle(self) -> list[tuple[bytes, bytes]]:
        """One decision (blocking); the LagSample records to publish, as (key, value)."""
        assert self.reader is not None
        while events := self.reader.poll(0.1):
            self.keeps.apply(events)
        now, wall_ms = time.monotonic(), int(self.wall_clock() * 1000)
        cycle_s = now - self._last_cycle[0] if self._last_cycle else self.policy_settings.cycle_s
        since_ms = self._last_cycle[1] if self._last_cycle else wall_ms
        self._last_cycle = (now, wall_ms)
        self.cycles += 1
        router = next((g for g in self.groups if g.stage == ROUTER), None)
        reduces = [g for g in self.groups if g.stage == REDUCE]
        capacity = self.capacity(now, [g.group for g in reduces])
        if router is None or not all(g.rated for g in self.groups) or (reduces and capacity is None):
            # rates not measured yet read as 0: a plan from them would be noise (no decision at all);
            # a reduce job reporting for the first time would read as a capacity of 0
            log.debug("shedder %s: cycle %d: rates or capacity not measured yet, no decision",
                      self.id, self.cycles)  # fmt: skip
            self.gauges.update_lags(self.groups)
            return self._lag_samples(since_ms) if self.settings.publish_lag else []
        if self.keeps.warming_up(wall_ms, self.settings.scaling_hold_s):
            log.info("shedder %s: cycle %d: no decision: the scaling action at epoch %d is warming up",
                     self.id, self.cycles, self.keeps.scaled_epoch)  # fmt: skip
            self.gauges.update_lags(self.groups)
            return self._lag_samples(since_ms) if self.settings.publish_lag else []
        keeps = {s.topic: self.keeps.keep_for(s.topic) for s in self.streams}
        observations, service, views = observe_streams(
            self.streams, router, reduces, keeps, self._previous_lags, self.settings.trend_tolerance_s
        )
        self._previous_lags = {t: v.lag_s for t, v in views.items()}
        decision = self.policy.decide(observations, service, max(cycle_s, 1e-3), capacity)
        self.last_decision = decision
        self._say(decision)
        self.send_changes(decision)
        self.gauges.update_lags(self.groups)
        self.gauges.update_decision(decision, {t: v.lag_s for t, v in views.items()})
        skipped = self.reader.skipped if self.reader is not None else {}
        self.gauges.update_totals(
            self.cycles, self.decisions, self.answers, self.undecodable, skipped, resent=self.resent
        )
        return self._lag_samples(since_ms) if self.settings.publish_lag else []

    def capacity(self, now: float, jobs: Sequence[str]) -> float | None:
        """The reduce jobs' capacity (:mod:`services.shedder.capacity`): the smallest job's, from its
        batches of the last ``capacity_window_s`` at batches of ``capacity_batch_s``; None without
        jobs or while one has not reported a batch with rows."""
        rates = []
        for job in jobs:
            rate, model = job_capacity(
                self.batches.get(job, ()),
                now,
                self.settings.capacity_window_s,
                self.settings.capacity_batch_s,
                self._cost_models.get(job),
            )
            self._cost_models[job] = model
            rates.append(rate)
        return pipeline_capacity(rates)

    def _in_order(self, decision: Decision) -> list[tuple[str, float]]:
        """The changes in the order the log should hold them: sheds first, lower priority first (it
        loses accuracy first), then lifts, higher priority first (it regains accuracy first)."""
        priority = {s.topic: s.priority for s in self.streams}
        before = decision.streams

        def order(item: tuple[str, float]) -> tuple[int, int, str]:
            topic, keep = item
            lifting = keep > before[topic].keep_before
            return (1, -priority[topic], topic) if lifting else (0, priority[topic], topic)

        return sorted(decision.changes.items(), key=order)

    def _say(self, decision: Decision) -> None:
        level = logging.DEBUG
        if decision.status is Status.CANNOT_HOLD:
            level = logging.WARNING
        elif decision.changes or decision.status is not Status.OK:
            level = logging.INFO
        log.log(level, "shedder %s: cycle %d: %s: %s", self.id, self.cycles, decision.status, decision.reason)

    def send_changes(self, decision: Decision) -> None:
        """A cycle's requests: each change of ``decision`` in the log's order, then the answers."""
        for topic, keep in self._in_order(decision):
            self._request(topic, keep, decision)
        self._collect_answers()

    def _request(self, topic: str, keep: float, decision: Decision) -> None:
        rid = request_id(self.id, topic, self.keeps.basis_for(topic), keep)
        due = self.outbox.due(rid, self.cycles)
        if self.client is None or due is None:
            return  # dry run; queued or applied already (the controller answers it); or backing off
        reason = f"shedder {self.id}: {decision.status}: {decision.reason}"[:900]
        body: dict[str, Any] = {"target": topic, "keep_probability": keep, "reason": reason}
        self.client.send("SHEDDING", body, request_id=rid)
        self.outbox.sending(rid)
        self.decisions += 1
        refusal = self.outbox.refusal(rid)
        if due is Send.AGAIN and refusal is not None:
            self.resent += 1
            log.warning(
                "shedder %s: asking again for %s keep %.3f (request %s, refused %d time(s), last: %s)",
                self.id, topic, keep, rid, refusal.count, refusal.reason,
            )  # fmt: skip
        else:
            log.info("shedder %s: asked %s keep %.3f (request %s)", self.id, topic, keep, rid)

    def _collect_answers(self) -> None:
        if self.client is None or not self.outbox.pending:
            return
        for rid, answer in self.client.wait(sorted(self.outbox.pending), 0.2).items():
            self.outbox.answered(rid, answer.accepted, answer.reason, self.cycles)
            outcome = "refused" if not answer.accepted else "duplicate" if answer.duplicate else "accepted"
            self.answers[outcome] += 1
            refusal = self.outbox.refusal(rid)
            if not answer.accepted and refusal is not None:
                log.warning(
                    "shedder %s: request %s refused (%s): %s; asked again when decided again, from cycle %d",
                    self.id, rid, answer.reason, answer.detail, refusal.due,
                )  # fmt: skip

    def _lag_samples(self, since_ms: int) -> list[tuple[bytes, bytes]]:
        """Every group's partitions as measured by the last sample; ``interval_end`` is when it was
        measured, ``interval_start`` the previous cycle."""
        out = []
        end_ms = max(self._sampled_ms, since_ms)
        for g in self.groups:
            for p in g.partitions:
                body = {
                    "group": g.group,
                    "topic": p.topic,
                    "partition": p.partition,
                    "committed_offset": -1 if p.committed is None else p.committed,
                    "end_offset": p.end,
                    "lag_records": p.lag_records,
                    "lag_seconds": p.lag_seconds,
                    "stage": g.stage,
                    "status": str(p.status),
                    "group_status": str(g.status),
                    "arrival_rate": p.arrival_rate if math.isfinite(p.arrival_rate) else 0.0,
                    "service_rate": p.service_rate if math.isfinite(p.service_rate) else 0.0,
                }
                value = self.codec.encode(metrics_record(self.id, since_ms, end_ms, "LagSample", body))
                out.append((f"{g.group}/{p.topic}/{p.partition}".encode(), value))
        return out
