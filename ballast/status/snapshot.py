"""A deployment's state folded from what its services publish: pure, so it is tested on records made by hand.

Why from the metrics topic and the control log only: ``ballast status`` must work for any running
deployment, from any machine that reaches its Kafka, without asking a service anything; and the
demo's live view must show what the services decided, not what the demo thinks they did. Every
figure here is the newest one published:

* worker load, imbalance, table size, migration in flight: the controller's ``ControllerStatus``
  (per interval; without a controller, the routers' per-worker counts of their newest interval);
* time lag per stage: the shedder's ``LagSample`` (the largest partition's of the group's newest
  cycle, :mod:`ballast.metrics.lag`);
* micro-batches and watermark: each reduce job's ``ReduceProgress``;
* epoch and keep-probabilities: the control log's folded state;
* instances per stage, their true rates and the last scaling decision: the controller's
  ``ControllerStatus`` (its ``scaling``, when the scaling loop runs).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from ballast.metrics.lag import GroupLag, NewestLag
from ballast.metrics.records import ControllerStatus, LagSample, Metric, ReduceProgress, RouterKeyStats


@dataclass
class StageLag:
    """The newest time lag of one stage of one group (a router group, or a reduce job)."""

    stage: str
    group: str
    lag_s: float | None  # the largest partition's (None: not known)
    status: str
    measured_ms: int

    @classmethod
    def of(cls, g: GroupLag) -> StageLag:
        lag = None if math.isnan(g.lag_seconds) else g.lag_seconds
        return cls(g.stage, g.group, lag, g.status, g.measured_ms)


@dataclass
class JobProgress:
    """A reduce job's newest micro-batch."""

    job: str
    batch_id: int
    input_rows: int
    duration_ms: int
    watermark_ms: int
    measured_ms: int


@dataclass
class DeploymentStatus:
    """What ``ballast status`` shows (``--json``: this, as a dict)."""

    prefix: str
    workers: int
    epoch: int = 0
    table_size: int = 0
    keep: dict[str, float] = field(default_factory=dict)  # per topic ("*": every topic); absent = 1
    controller: str = ""  # "" when no controller published in the window read
    worker_load: list[float] = field(default_factory=list)
    load_source: str = ""  # "controller" or "routers"
    realized_imbalance: float | None = None
    predicted_imbalance: float | None = None
    migration_id: str = ""
    migration_keys: int = 0
    migration_bytes: int = 0
    decisions: int = 0
    last_decision: str = ""
    scaling: dict[str, Any] | None = None  # the controller's scaling loop (ScalingStatus), if running
    lag: list[StageLag] = field(default_factory=list)
    jobs: list[JobProgress] = field(default_factory=list)
    results_written: int = 0  # records on the output topic
    measured_ms: int = 0  # the newest metric folded

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def stage_lag(self, stage: str) -> float | None:
        """The largest lag of ``stage`` over its groups (None: none known)."""
        known = [s.lag_s for s in self.lag if s.stage == stage and s.lag_s is not None]
        return max(known) if known else None


class StatusFold:
    """Folds metrics, newest wins, into the parts of a :class:`DeploymentStatus` they feed."""

    def __init__(self) -> None:
        self._controller: tuple[int, str, ControllerStatus] | None = None
        self._routers: dict[str, tuple[int, RouterKeyStats]] = {}
        self._lag = NewestLag()
        self._jobs: dict[str, tuple[int, ReduceProgress]] = {}
        self.newest_ms = 0

    def add(self, metrics: Iterable[Metric]) -> None:
        for m in metrics:
            at, body = m.interval_end, m.body
            self.newest_ms = max(self.newest_ms, at)
            if isinstance(body, ControllerStatus):
                if self._controller is None or at >= self._controller[0]:
                    self._controller = (at, m.source, body)
            elif isinstance(body, RouterKeyStats):
                _newest(self._routers, m.source, at, body)
            elif isinstance(body, LagSample):
                self._lag.add([m])
            elif isinstance(body, ReduceProgress):
                _newest(self._jobs, body.job, at, body)

    def status(
        self, prefix: str, workers: int, control: Any = None, results_written: int = 0
    ) -> DeploymentStatus:
        """The newest of everything folded; ``control`` is the control log's folded state, if read."""
        s = DeploymentStatus(prefix=prefix, workers=workers, results_written=results_written,
                             measured_ms=self.newest_ms)  # fmt: skip
        if control is not None:
            s.epoch, s.table_size = int(control.epoch), len(control.table)
            s.keep = {str(k): float(v) for k, v in control.keep_probability.items()}
        if self._controller is not None:
            _, source, c = self._controller
            s.controller, s.load_source = c.controller or source, "controller"
            s.worker_load = [float(x) for x in c.worker_load]
            s.realized_imbalance, s.predicted_imbalance = c.realized_imbalance, c.predicted_imbalance
            s.migration_id, s.migration_keys = c.migration_id, c.migration_keys
            s.migration_bytes = c.migration_bytes
            s.decisions, s.last_decision = c.decisions, c.last_decision
            s.scaling = asdict(c.scaling) if c.scaling is not None else None
            s.table_size = s.table_size or c.table_size
        elif self._routers:
            s.worker_load = router_load(b for _, b in self._routers.values())
            s.load_source = "routers"
            s.realized_imbalance = max_over_mean(s.worker_load)
        s.lag = [StageLag.of(g) for g in self._lag.groups()]
        s.jobs = [
            JobProgress(
                job, p.batch_id, p.input_rows, int(p.durations_ms.get("triggerExecution", 0)),
                p.watermark_ms, at,
            )
            for job, (at, p) in sorted(self._jobs.items())
        ]
        return s


def _newest(table: dict[Any, tuple[int, Any]], key: Any, at: int, body: Any) -> None:
    if key not in table or at >= table[key][0]:
        table[key] = (at, body)


def router_load(stats: Iterable[RouterKeyStats]) -> list[float]:
    """Records per worker in the routers' newest intervals, summed over routers."""
    load: list[float] = []
    for b in stats:
        if len(load) < len(b.worker_records):
            load += [0.0] * (len(b.worker_records) - len(load))
        for w, n in enumerate(b.worker_records):
            load[w] += n
    return load


def max_over_mean(load: list[float]) -> float | None:
    """Max over mean of the workers' load (None: no load)."""
    total = sum(load)
    return max(load) / (total / len(load)) if load and total > 0 else None
