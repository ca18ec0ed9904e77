"""What a demo run measured, as data: ``demo-report/summary.json``, the plots and the verdict.

Why one record for all three: the report's figures are drawn from this record and nothing else, so
"the figures in summary.json match the plots" holds by construction, and the end-to-end test reads
the same file a user opens. Every series is a list of rows (``[t_s, …]``), ``t_s`` in seconds since
the run's first scheduled input event, so the two runs (Ballast, and hash only) share one time axis.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class RunSummary:
    """One run of the same input: ``ballast`` (the loop and shedding on) or ``hash`` (both off)."""

    name: str
    rebalance: bool
    shedding: bool
    theta: float
    interval_s: float
    target_s: float
    shifts_s: list[float] = field(default_factory=list)  # when the hot set was drawn anew
    burst_s: list[float] = field(default_factory=list)  # [start, end] of the overload burst
    # per interval of event time, from the routed topic: [t_s (interval start), max/mean over workers]
    imbalance: list[list[float]] = field(default_factory=list)
    # the reduce's micro-batches: [t_s, duration ms, rows read]
    batches: list[list[float]] = field(default_factory=list)
    # MIGRATION_STEP events of the control log: [t_s, epoch, phase, keys]
    migrations: list[list[Any]] = field(default_factory=list)
    # the routing table after each ROUTING_UPDATE: [t_s, epoch, pinned keys]
    table: list[list[float]] = field(default_factory=list)
    # the shedder's time lag per stage: [t_s, router lag s, reduce lag s] (None: not measured then)
    lag: list[list[float | None]] = field(default_factory=list)
    # the keep-probability in force for the input stream: [t_s, keep]
    keep: list[list[float]] = field(default_factory=list)
    # judged results per window start: [t_s, windows, shed windows, mean relative error of shed windows,
    # share of shed windows whose interval held the truth]
    result_error: list[list[float | None]] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)  # the summary table's numbers for this run
    logs: dict[str, str] = field(default_factory=dict)  # service name -> its log file

    def pipeline_lag(self) -> list[tuple[float, float]]:
        """(t_s, router + reduce lag) where both stages were measured: what a result waits, as the
        verdict judges it and the lag plot draws it."""
        return [(float(r[0]), float(r[1]) + float(r[2])) for r in self.lag
                if len(r) >= 3 and r[1] is not None and r[2] is not None]  # fmt: skip


@dataclass
class Verdict:
    """One line of the verdict: what was checked, whether it held, and the figure behind it."""

    check: str
    ok: bool
    detail: str


@dataclass
class DemoSummary:
    """Everything ``make demo`` reports."""

    ok: bool = False
    started_at: float = 0.0  # unix seconds
    duration_s: float = 0.0
    settings: dict[str, Any] = field(default_factory=dict)
    runs: dict[str, RunSummary] = field(default_factory=dict)
    verdicts: list[Verdict] = field(default_factory=list)
    # a service that failed (or Ctrl-C): which, why, and where its log is
    failure: dict[str, str] | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def write(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=1, default=float) + "\n")

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> DemoSummary:
        runs = {k: RunSummary(**v) for k, v in data.get("runs", {}).items()}
        verdicts = [Verdict(**v) for v in data.get("verdicts", [])]
        rest = {k: v for k, v in data.items() if k not in ("runs", "verdicts")}
        return cls(runs=runs, verdicts=verdicts, **rest)

    @classmethod
    def read(cls, path: str | Path) -> DemoSummary:
        return cls.from_json(json.loads(Path(path).read_text()))
