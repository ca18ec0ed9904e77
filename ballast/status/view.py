"""A :class:`DeploymentStatus` drawn for a terminal (rich), and as plain lines for logs and pipes.

Why one drawing for both ``ballast status`` and the demo's live view: the demo is where a user
first sees Ballast work, and what they learn to read there should be what they see on their own
deployment afterwards.
"""

from __future__ import annotations

import time

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from ballast.status.snapshot import DeploymentStatus

BAR_WIDTH = 36


def _fmt_lag(lag: float | None) -> str:
    return "?" if lag is None else f"{lag:.1f} s"


def _keep_line(s: DeploymentStatus) -> str:
    if not s.keep:
        return "keep 1 (no shedding)"
    return "keep " + ", ".join(f"{topic} {keep:.2f}" for topic, keep in sorted(s.keep.items()))


def headline(s: DeploymentStatus) -> str:
    """One line: epoch, table, imbalance, migration, lag, keep, results (also for plain logs)."""
    imb = "?" if s.realized_imbalance is None else f"{s.realized_imbalance:.2f}"
    moving = f"moving {s.migration_keys} keys" if s.migration_id else "no migration"
    lags = " ".join(f"{g.stage} {_fmt_lag(g.lag_s)}" for g in s.lag) or "lag ?"
    return (f"epoch {s.epoch} · table {s.table_size} · max/mean {imb} · {moving} · {lags} · "
            f"{_keep_line(s)} · {s.results_written:,} results")  # fmt: skip


def load_bars(s: DeploymentStatus) -> Table:
    """One bar per worker, scaled to the busiest; the mean marked in the caption."""
    table = Table(show_header=False, box=None, padding=(0, 1))
    peak = max(s.worker_load, default=0.0)
    mean = sum(s.worker_load) / len(s.worker_load) if s.worker_load else 0.0
    for w, load in enumerate(s.worker_load):
        filled = round(BAR_WIDTH * load / peak) if peak > 0 else 0
        style = "red" if mean and load > mean * 1.3 else "green"
        table.add_row(f"w{w}", Text("█" * filled + "·" * (BAR_WIDTH - filled), style=style), f"{load:,.0f}")
    return table


def render(s: DeploymentStatus, title: str = "") -> RenderableType:
    """A panel: the headline figures, the per-worker load bars, lag per stage, the reduce's batches."""
    imb = "?" if s.realized_imbalance is None else f"{s.realized_imbalance:.2f}"
    pred = "" if not s.predicted_imbalance else f", planned {s.predicted_imbalance:.2f}"
    source = {"controller": f"controller {s.controller}", "routers": "routers"}.get(s.load_source, "no load")
    facts = Table(show_header=False, box=None, padding=(0, 1))
    facts.add_row("epoch", f"{s.epoch}   table {s.table_size} keys   decisions {s.decisions}")
    facts.add_row("load", f"max/mean {imb}{pred} ({source}, last interval)")
    moving = (f"{s.migration_id}: {s.migration_keys} keys, {s.migration_bytes / 1024:,.0f} KiB"
              if s.migration_id else "none")  # fmt: skip
    facts.add_row("migration", moving)
    lags = "   ".join(f"{g.stage} {g.group}: {_fmt_lag(g.lag_s)} {g.status}" for g in s.lag)
    facts.add_row("time lag", lags or "? (no shedder publishes lag)")
    facts.add_row("shedding", _keep_line(s))
    for j in s.jobs:
        facts.add_row("reduce", f"{j.job}: batch {j.batch_id}, {j.input_rows:,} rows in {j.duration_ms:,} ms")
    facts.add_row("results", f"{s.results_written:,} records on the output topic")
    if s.last_decision:
        facts.add_row("decided", s.last_decision[:120])
    if s.scaling:
        facts.add_row("scaling", scaling_line(s.scaling))
        if s.scaling.get("last_decision"):
            facts.add_row("scaled", s.scaling["last_decision"][:120])
    return Panel(Group(facts, load_bars(s)), title=title or f"Ballast · {s.prefix}", expand=False)


def scaling_line(sc: dict) -> str:
    """``on: router 2 (needs 2, 2,000/s each)   reduce 4 (needs 4, 750/s each)``."""
    parts = []
    for stage, n in sorted(sc.get("instances", {}).items()):
        need = sc.get("optimal", {}).get(stage)
        rate = sc.get("true_rates", {}).get(stage)
        extra = [f"needs {need}"] if need is not None else []
        if rate:
            extra.append(f"{rate:,.0f}/s each")
        parts.append(f"{stage} {n}" + (f" ({', '.join(extra)})" if extra else ""))
    return f"{sc.get('mode', '?')}: " + "   ".join(parts)


def age_s(s: DeploymentStatus) -> float | None:
    """Seconds since the newest metric folded (None: none)."""
    return None if not s.measured_ms else max(0.0, time.time() - s.measured_ms / 1000)
