"""``ballast controller run``: the one writer of the control log, and the loop that keeps workers level.

What one pass of the loop does, in order (docs/controller.md):

1. **Requests.** Everything queued in the requests topic is answered in one transaction with the
   events it adds and the requests' offsets (:mod:`services.controller.transport`); the decisions
   are the pure :class:`~services.controller.sequencer.Sequencer`'s, each request's wait measured
   on the broker's clock (:mod:`services.controller.request_age`).
2. **Metrics.** Router key statistics and worker statistics are read as they arrive and kept for
   the current interval only; the workers' ``chunks_installed`` feed the migration in flight.
3. **Migration.** A paced migration (:mod:`services.controller.pacing`) sends its next step once the
   previous one is installed, reports a step that timed out, and ends with DONE or ABORT; every
   step and bracket is an event of the log, so the log tells the migration's story and a
   restarted controller resumes it (:func:`resume_migration`).
4. **Interval.** Every ``interval_s``: the interval's statistics folded into load priced at each
   worker's measured cost per record (:mod:`services.controller.interval_load`), the forecast
   updated, the trigger asked; a rebalance plans for the forecast and starts a migration.
5. **Snapshot, status.** A snapshot every ``snapshot_every`` epochs; a ``ControllerStatus`` record
   every ``status_every_s`` (the standby's heartbeat and anyone's view), and the Prometheus gauges.

Why one thread: every decision reads and changes the same state (the log's fold, the migration in
flight), and all of them are quick; one loop keeps them in one order, the order of the log.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

from ballast.control.state import ControlState, initial_state, routing_update
from ballast.kafka.admin import make_admin, partition_count
from ballast.kafka.configuration import KafkaConfig
from ballast.kafka.topics import TopicLayout
from ballast.metrics.reader import MetricsReader
from ballast.metrics.records import ControllerStatus, RouterKeyStats, WorkerStats
from ballast.planner.forecast import ForecastSettings, LoadForecaster
from ballast.planner.trigger import TriggerSettings, TriggerState, observe
from ballast.routing.murmur2 import kafka_partition
from services.controller.audit import ControlAudit
from services.controller.autoscaler import Autoscaler
from services.controller.config import ControllerSettings
from services.controller.interval_load import IntervalLoad, fold_interval, key_state_bytes, router_weights
from services.controller.pacing import (
    KeyMove,
    Marker,
    Migration,
    PacingSettings,
    SendStep,
    StepTimedOut,
    resume_migration,
)
from services.controller.planning import RoundResult, plan_interval
from services.controller.prometheus import ControllerGauges
from services.controller.request_age import PROBE_KIND, RequestAges, append_time_ms
from services.controller.router_reports import RouterReports
from services.controller.sequencer import Answer, Request, RequestLimits, Sequencer, decode_request, refuse
from services.controller.status_record import StatusPublisher
from services.controller.transport import ControlLink, is_fenced

log = logging.getLogger(__name__)


class Fenced(RuntimeError):
    """Another controller took the log over."""


class ForeignEvent(RuntimeError):
    """The log holds an event this controller did not write (audit.py): appending now would write a
    conflicting epoch."""


@dataclass
class Tallies:
    """What the controller did since it started (status record, Prometheus)."""

    accepted: int = 0
    refused: Counter[str] = field(default_factory=Counter)
    decisions: int = 0
    last_decision: str = ""
    realized: float = 0.0
    predicted: float = 0.0
    worker_load: list[float] = field(default_factory=list)
    step_timeouts: int = 0


class Controller:
    """One controller instance (see the module docstring)."""

    def __init__(self, kafka: KafkaConfig, layout: TopicLayout, settings: ControllerSettings) -> None:
        self.kafka = kafka
        self.layout = layout
        self.settings = settings
        self.id = settings.resolved_id()
        self.routed_partitions = partition_count(make_admin(kafka), layout.name("routed"))
        self.pacing = PacingSettings(
            settings.pacing,
            settings.step_keys,
            settings.step_bytes,
            settings.step_timeout_s,
            settings.on_timeout,
        )
        self.trigger = TriggerSettings(settings.theta, settings.consecutive, settings.min_gap)
        self.trigger_state = TriggerState()
        self.forecaster = LoadForecaster(ForecastSettings(calibrate=settings.forecast_calibration))
        self.tallies = Tallies()
        self.migration: Migration | None = None
        self.link: ControlLink | None = None
        self.audit: ControlAudit | None = None
        self.sequencer: Sequencer | None = None
        self._router_stats = RouterReports(settings.router_report_grace)
        self._worker_stats: list[WorkerStats] = []
        self._installs: list[tuple[str, int]] = []
        self._status = StatusPublisher(kafka, self.id, layout.name("metrics"))
        self._reader: MetricsReader | None = None
        self._next_interval = 0.0
        self._next_status = 0.0
        self._pending_events: list[dict[str, Any]] = []
        self._last: tuple[IntervalLoad, list[WorkerStats]] | None = None  # the last interval folded
        self._ages = RequestAges(int(settings.request_ttl_s * 1000), self._probe_clock, self._say_unaged)
        self.autoscaler = Autoscaler.create(kafka, layout, settings, self.routed_partitions)
        self.gauges = ControllerGauges()
        if settings.metrics_port:
            self.gauges.serve(settings.metrics_port, settings.metrics_host)

    # --- start ------------------------------------------------------------------------------------

    def connect(self) -> None:
        """Fence every earlier writer, fold the log, resume a migration it left in flight."""
        self.link = ControlLink(self.kafka, self.layout, self.id, on_rewind=self._rewound)
        self._load_log()
        start = "end"
        if self.migration is not None:
            from ballast.kafka.reading import offsets_at_time

            topic = self.layout.name("metrics")
            start = offsets_at_time(self.kafka, topic, self._migration_started_ms, "controller-times", 15)
        self._reader = MetricsReader(self.kafka, self.layout.name("metrics"), start, keep=False)
        self._next_interval = time.monotonic() + self.settings.interval_s
        if self.autoscaler is not None:
            self.autoscaler.start(self.state)
        log.info(
            "controller %s: writing %s at epoch %d", self.id, self.layout.name("control"), self.state.epoch
        )

    def _load_log(self) -> None:
        assert self.link is not None
        s = self.settings
        if self.audit is not None:
            self.audit.close()
        self.audit = audit = ControlAudit(self.link)
        self.link.before_commit = audit.before_commit
        initial = initial_state(self.routed_partitions)
        state, tail, reader = self.link.read_log(initial, s.remembered_requests, on_skip=audit.skipped_record)
        audit.follow(reader, initial)
        limits = RequestLimits(s.max_request_keys, s.max_request_bytes, s.remembered_requests)
        self.sequencer = Sequencer(state, self.id, limits, s.snapshot_every, int(s.request_ttl_s * 1000))
        self.sequencer.remember(tail)
        if not reader.history_snapshots and state.epoch >= s.snapshot_every:
            # no snapshot carries the history (a log of an older Ballast, folded from its origin):
            # the next transaction writes one, so readers that need it stop folding from the origin
            self.sequencer.since_snapshot = max(self.sequencer.since_snapshot, s.snapshot_every)
        resumed = resume_migration(tail, self.pacing)
        self.migration = None
        self._migration_started_ms = 0
        if resumed is not None:
            self.migration, _epochs = resumed
            mid = self.migration.migration_id
            self._migration_started_ms = next(
                e["issued_at"]
                for e in tail
                if e["type"] == "MIGRATION_STEP" and e["payload"][1]["migration_id"] == mid
            )
            log.info(
                "controller %s: resuming migration %s (%d of %d steps sent)",
                self.id, self.migration.migration_id, self.migration.current + 1, len(self.migration.steps),
            )  # fmt: skip
        self._in_flight()

    @property
    def state(self) -> ControlState:
        assert self.sequencer is not None
        return self.sequencer.state

    def _rewound(self) -> None:
        """A transaction was aborted: what this process had folded may not be in the log."""
        log.warning("controller %s: transaction aborted; folding the log again", self.id)
        self._load_log()

    # --- the loop -----------------------------------------------------------------------------------

    def step(self) -> None:
        """One pass (see the module docstring); raises :class:`Fenced` when another took over."""
        try:
            self._answer_requests()
            self._read_metrics()
            self._drive_migration()
            now = time.monotonic()
            if now >= self._next_interval:
                self._next_interval = now + self.settings.interval_s
                self._end_interval()
            if self.autoscaler is not None and self.autoscaler.due(now):
                own = self._own_event
                self.autoscaler.evaluate(now, self.state, self.migration is not None, own)
            self._flush_own_events()
            if self.autoscaler is not None:
                self.autoscaler.committed()
            self._audit_log()
        except Exception as exc:
            if is_fenced(exc):
                raise Fenced(str(exc)) from exc
            raise
        now = time.monotonic()
        if now >= self._next_status:
            self._next_status = now + self.settings.status_every_s
            self._publish_status()

    def _answer_requests(self) -> None:
        assert self.link is not None and self.sequencer is not None
        msgs = self.link.poll(500, self.settings.poll_ms / 1000.0)
        if not msgs:
            return
        batch = [decode_request(m.value(), m.key(), self.state.epoch) for m in msgs]
        batch = self._aged(msgs, batch)
        self._refuse_foreign()
        self.link.begin()
        now = int(time.time() * 1000)
        for m, decoded in zip(msgs, batch, strict=True):
            if isinstance(decoded, Request) and decoded.kind == PROBE_KIND:
                self.link.consumed(m)  # a clock probe (ours or an earlier controller's): no answer
                continue
            if isinstance(decoded, Answer):
                answer = decoded
            elif decoded.kind == "REBALANCE":
                answer = self._rebalance_request(decoded)
            else:
                answer = self.sequencer.answer(decoded, now)
            # a REBALANCE that started a migration gave its START and first step the epochs just
            # numbered: they go into this transaction now, before any later request's event or a
            # snapshot takes the epoch after them (written after the commit: a gap for every reader)
            self._append_own_events()
            if answer.event is not None:
                self.link.append([answer.event])
            if answer.accepted and not answer.duplicate:
                self.tallies.accepted += 1
            elif not answer.accepted:
                self.tallies.refused[answer.reason] += 1
                log.info(
                    "controller %s: refused %s: %s (%s)",
                    self.id,
                    answer.request_id,
                    answer.reason,
                    answer.detail,
                )
            self.link.respond(answer.response(self.id, now))
            self.link.consumed(m)
        if self.sequencer.snapshot_due():
            self.link.append([self.sequencer.snapshot(now)])
        self.link.commit()

    def _aged(self, msgs: list[Any], batch: list[Request | Answer]) -> list[Request | Answer]:
        """The batch's requests with their waits in the requests topic on the broker's clock
        (:mod:`services.controller.request_age`); clock probes and refusals are not aged."""
        aged = [i for i, r in enumerate(batch) if isinstance(r, Request) and r.kind != PROBE_KIND]
        waits = self._ages.waits([append_time_ms(msgs[i].timestamp()) for i in aged])
        out = list(batch)
        for i, waited in zip(aged, waits, strict=True):
            out[i] = replace(batch[i], waited_ms=waited)  # type: ignore[type-var]
        return out

    def _probe_clock(self) -> int | None:
        assert self.link is not None
        return self.link.probe_clock()

    def _say_unaged(self) -> None:
        topic = self.layout.name("requests")
        log.warning(
            "controller %s: %s stamps its writers' CreateTime, not LogAppendTime: requests are not aged "
            "on the broker's clock, so none expires (kafka-configs --alter --entity-type topics "
            "--entity-name %s --add-config message.timestamp.type=LogAppendTime)", self.id, topic, topic,
        )  # fmt: skip

    def _read_metrics(self) -> None:
        assert self._reader is not None
        for metric in self._reader.poll(0.0):
            body = metric.body
            if isinstance(body, RouterKeyStats):
                self._router_stats.add(metric.source, metric.interval_end - metric.interval_start, body)
            elif isinstance(body, WorkerStats):
                self._worker_stats.append(body)
                self._installs.extend((c.key, c.epoch) for c in body.chunks_installed)
            if self.autoscaler is not None:
                self.autoscaler.observe(metric, self.state.num_workers)

    # --- migrations ---------------------------------------------------------------------------------

    def _drive_migration(self) -> None:
        m = self.migration
        if m is None:
            return
        installs, self._installs = self._installs, []
        if not self.settings.wait_installs:  # nothing reports installs: a sent step counts as done
            installs = [(mv.key, e) for i, e in m.epochs.items() for mv in m.steps[i]]
        now = time.monotonic()
        # a migration resumed from the log before its first step went out sends it now
        self._act(m.resume(now) if m.current < 0 else m.observe(installs, now))

    def _act(self, actions: list[Any]) -> None:
        m = self.migration
        assert m is not None and self.sequencer is not None
        now = int(time.time() * 1000)
        for action in actions:
            if isinstance(action, SendStep):
                assign = {mv.key: mv.target for mv in action.moves if mv.target != self._home(mv.key)}
                unassign = [mv.key for mv in action.moves if mv.target == self._home(mv.key)]
                reason = f"migration {m.migration_id}: step {action.index + 1} of {len(m.steps)}"
                if action.index > 0 and m.step_installed(action.index - 1):
                    self._own_marker(Marker.of(m.migration_id, "STATE_SENT", m.steps[action.index - 1]), now)
                event = self.sequencer.own(
                    *routing_update(assign, unassign, reason=reason, migration_id=m.migration_id), now
                )
                self._pending_events.append(event)
                m.sent(action.index, int(event["epoch"]))
            elif isinstance(action, StepTimedOut):
                self.tallies.step_timeouts += 1
                log.warning(
                    "controller %s: migration %s step %d not installed after %.0f s: %s",
                    self.id, m.migration_id, action.index + 1, action.waited_s, list(action.missing)[:10],
                )  # fmt: skip
            elif isinstance(action, Marker):
                if action.phase == "DONE" and m.current >= 0:  # the last step is installed
                    self._own_marker(Marker.of(m.migration_id, "STATE_SENT", m.steps[m.current]), now)
                self._own_marker(action, now)
                if action.phase in ("DONE", "ABORT"):
                    log.info("controller %s: migration %s %s", self.id, m.migration_id, action.phase)
                    self.migration = None
        self._in_flight()

    def _own_marker(self, marker: Marker, now: int) -> None:
        self._own_event("MIGRATION_STEP", marker.payload(), now)

    def _own_event(self, etype: str, body: dict[str, Any], now_ms: int | None = None) -> dict[str, Any]:
        """An event of the controller's own, numbered now, written with the next transaction."""
        assert self.sequencer is not None
        event = self.sequencer.own(etype, body, int(time.time() * 1000) if now_ms is None else now_ms)
        self._pending_events.append(event)
        return event

    def _home(self, key: str) -> int:
        return kafka_partition(key.encode(), self.state.num_workers)

    def _in_flight(self) -> None:
        assert self.sequencer is not None
        m = self.migration
        self.sequencer.in_flight = {mv.key for mv in m.moves} if m is not None else set()

    def _flush_own_events(self) -> None:
        """The controller's own events (steps, brackets, a snapshot) in one transaction."""
        if not self._pending_events:
            return
        assert self.link is not None and self.sequencer is not None
        self._refuse_foreign()
        if self.sequencer.snapshot_due():
            self._pending_events.append(self.sequencer.snapshot(int(time.time() * 1000)))
        self.link.begin()
        self._append_own_events()
        self.link.commit()

    def _refuse_foreign(self) -> None:
        """Before a transaction that may append: the log holds nothing this controller did not
        write (:meth:`~services.controller.audit.ControlAudit.foreign`)."""
        assert self.sequencer is not None
        if self.audit is None:  # not connected (a controller driven by hand)
            return
        own = self.sequencer.state.epoch - len(self._pending_events)
        why = self.audit.foreign(own, self.id)
        if why is not None:
            raise ForeignEvent(
                f"{self.layout.name('control')}: {why}. Refusing to append (it would write a "
                f"conflicting epoch). Another writer appended under the fence (`ballast control send "
                f"--direct`), or the log is unsigned and open to anyone who can write it "
                f"(docs/security.md); restart the controller to fold the log as it stands"
            )

    def _audit_log(self) -> None:
        """Dead letters for records on the log that are no event, in a transaction of their own
        when no other one carried them (services.controller.audit)."""
        assert self.link is not None and self.audit is not None
        if self.audit.poll():
            self.link.begin()
            self.link.commit()

    def _append_own_events(self) -> None:
        """The controller's own events so far into the open transaction, in their epochs' order."""
        assert self.link is not None
        if self._pending_events:
            self.link.append(self._pending_events)
            self._pending_events = []

    # --- intervals and plans ------------------------------------------------------------------------

    def _end_interval(self) -> None:
        reports, late = self._router_stats.end_interval()
        workers, self._worker_stats = self._worker_stats, []
        if late:
            log.info("controller %s: no report yet from %s this interval: counting its latest", self.id, late)
        n = self.state.num_workers
        routers = [body for _, _, body in reports]
        spans = [(source, span) for source, span, _ in reports]
        weights = router_weights(spans, self.settings.interval_s * 1000)
        load = fold_interval(routers, workers, self.state.table.route, n, self.settings.pricing, weights)
        if not routers:
            return
        self._last = (load, workers)
        self.tallies.realized = load.imbalance
        self.tallies.worker_load = [float(x) for x in load.worker_load]
        self.forecaster.observe(load.keys, load.key_load)
        if not self.settings.rebalance:
            return
        decision = observe(self.trigger_state, load.imbalance, self.trigger, busy=self.migration is not None)
        self.trigger_state = decision.state
        if decision.rebalance:
            result = self._plan(load, workers)
            self._start_migration(result, load, workers, decision.reason)

    def _plan(self, load: IntervalLoad, workers: list[WorkerStats]) -> RoundResult:
        cost = self.forecaster.predict(list(load.keys)) if self.settings.forecast else load.key_load
        result = plan_interval(load, cost, self.state, self.settings.plan_theta)
        self.tallies.predicted = result.predicted_max_mean
        return result

    def _start_migration(
        self, result: RoundResult, load: IntervalLoad, workers: list[WorkerStats], why: str
    ) -> None:
        if not result.changes:
            self.tallies.last_decision = f"{why}; the plan changes nothing"
            return
        route = self.state.table.route
        state_bytes = key_state_bytes(workers, load.keys, load.key_worker, self.state.num_workers)
        sizes = dict(zip(load.keys, state_bytes, strict=True))
        loads = dict(zip(load.keys, load.key_load, strict=True))
        moves = [
            KeyMove(k, route(k.encode()), w, int(sizes.get(k.encode(), 0))) for k, w in result.assign.items()
        ] + [
            KeyMove(k, route(k.encode()), self._home(k), int(sizes.get(k.encode(), 0)))
            for k in result.unassign
        ]
        moves = [m for m in moves if m.source != m.target]
        moves.sort(key=lambda m: -float(loads.get(m.key.encode(), 0.0)))  # the heaviest relief first
        if not moves:
            return
        mid = f"m-{self.state.epoch + 1}-{uuid.uuid4().hex[:6]}"
        self.migration = Migration.plan(mid, moves, self.pacing)
        self.tallies.decisions += 1
        self.tallies.last_decision = (
            f"{why}: {len(moves)} keys in {len(self.migration.steps)} steps ({self.pacing.mode}), "
            f"predicted max/mean {result.predicted_max_mean:.2f}"
        )
        log.info("controller %s: %s", self.id, self.tallies.last_decision)
        self._act(self.migration.start(time.monotonic()))

    def _rebalance_request(self, request: Request) -> Answer:
        """Plan now from the last interval; ``dry_run``: answer with the plan, change nothing."""
        assert self.sequencer is not None
        refusal = self.sequencer.check(request)
        epoch = self.state.epoch
        if refusal is not None:
            return refuse(request.request_id, epoch, *refusal)
        if self._last is None:
            return refuse(request.request_id, epoch, "no-load", "no interval with router statistics yet")
        load, workers = self._last
        result = self._plan(load, workers)
        detail = json.dumps(
            {
                "realized": round(load.imbalance, 4),
                "predicted": round(result.predicted_max_mean, 4),
                "assign": result.assign,
                "unassign": list(result.unassign),
                "tracked_keys": len(load.keys),
            }
        )
        if not bool(request.body.get("dry_run", True)):
            if self.migration is not None:
                return refuse(request.request_id, epoch, "migration-in-flight", "a migration is under way")
            self._start_migration(result, load, workers, "asked")
        return Answer(request.request_id, True, epoch, detail=detail)

    # --- status -------------------------------------------------------------------------------------

    def status(self) -> ControllerStatus:
        m = self.migration
        missing = m.not_installed() if m is not None else []
        t = self.tallies
        return ControllerStatus(
            controller=self.id,
            epoch=self.state.epoch,
            table_size=len(self.state.table),
            workers=self.state.num_workers,
            realized_imbalance=t.realized,
            predicted_imbalance=t.predicted,
            worker_load=t.worker_load,
            migration_id=m.migration_id if m is not None else "",
            migration_keys=len(missing),
            migration_bytes=sum(mv.state_bytes for mv in missing),
            requests_accepted=t.accepted,
            requests_refused=dict(t.refused),
            decisions=t.decisions,
            last_decision=t.last_decision,
            control_records_skipped=dict(self.audit.skipped) if self.audit is not None else {},
            scaling=self.autoscaler.status() if self.autoscaler is not None else None,
        )

    def _publish_status(self) -> None:
        status = self.status()
        self.gauges.update(status)
        self._status.publish(status)

    def close(self) -> None:
        if self.autoscaler is not None:
            self.autoscaler.close()
        if self.audit is not None:
            self.audit.close()
        if self.link is not None:
            self.link.close()
        if self._reader is not None:
            self._reader.follower.close()
        self._status.close()
