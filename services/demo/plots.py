"""The demo report's plots: one figure per question, drawn from a :class:`DemoSummary` and nothing else.

Why figures on their own canvas (no pyplot): pyplot keeps every figure in a global registry until it
is closed and picks a backend from the environment; an Agg canvas per figure needs no display, no
cleanup, and renders the same PNG on a laptop and in CI.

Every plot shares one time axis (seconds since the run's first scheduled input event), marks when
the hot set was drawn anew (dotted vertical lines) and shades the overload burst, so a reader can
line up cause and effect across the images.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from services.demo.summary import DemoSummary, RunSummary

BALLAST, HASH = "ballast", "hash"
RUN_LABELS = {BALLAST: "Ballast", HASH: "hash only"}
RUN_COLOURS = {BALLAST: "tab:blue", HASH: "tab:orange"}
PHASE_MARKERS = {  # migration phase -> (marker, colour)
    "START": ("^", "tab:green"),
    "STATE_SENT": (".", "tab:gray"),
    "DONE": ("o", "tab:blue"),
    "ABORT": ("X", "tab:red"),
}
SIZE_IN = (9.0, 3.6)
DPI = 100


@dataclass(frozen=True)
class Plot:
    """One image of the report: its file, what it shows, and how to read it (the HTML caption)."""

    file: str
    title: str
    caption: str
    draw: Callable[[DemoSummary], Figure]


# --- series helpers ---------------------------------------------------------------------------


def runs_in_order(summary: DemoSummary) -> list[tuple[str, RunSummary]]:
    """Ballast first, then hash only, then anything else: the colours and legend stay put."""
    known = [(n, summary.runs[n]) for n in (BALLAST, HASH) if n in summary.runs]
    return known + [(n, r) for n, r in summary.runs.items() if n not in (BALLAST, HASH)]


def column(rows: Iterable[Sequence[Any]], index: int) -> tuple[list[float], list[float]]:
    """``(t, value)`` pairs of one column, leaving out rows where it was not measured (None, short)."""
    ts, vs = [], []
    for row in rows:
        if len(row) > index and row[0] is not None and row[index] is not None:
            ts.append(float(row[0]))
            vs.append(float(row[index]))
    return ts, vs


def label(name: str) -> str:
    return RUN_LABELS.get(name, name)


def colour(name: str) -> str | None:
    return RUN_COLOURS.get(name)


# --- axis helpers -----------------------------------------------------------------------------


def new_axes(title: str, ylabel: str) -> tuple[Figure, Axes]:
    fig = Figure(figsize=SIZE_IN, dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.set_title(title)
    ax.set_xlabel("time since the first input event (s)")
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    return fig, ax


def mark_input(ax: Axes, summary: DemoSummary) -> None:
    """Shifts as dotted lines, the burst as a shaded span: both runs read the same input."""
    shifts = sorted({float(t) for _, r in summary.runs.items() for t in r.shifts_s})
    for i, t in enumerate(shifts):
        ax.axvline(t, color="gray", linestyle=":", linewidth=1, label="hot-set shift" if i == 0 else None)
    bursts = sorted({(float(r.burst_s[0]), float(r.burst_s[1])) for r in summary.runs.values()
                     if len(r.burst_s) >= 2})  # fmt: skip
    for i, (start, end) in enumerate(bursts):
        ax.axvspan(start, end, color="tab:red", alpha=0.08, label="burst" if i == 0 else None)


def no_data(ax: Axes) -> None:
    ax.text(0.5, 0.5, "no data", transform=ax.transAxes, ha="center", va="center", color="gray",
            fontsize=14)  # fmt: skip


def finish(fig: Figure, ax: Axes, summary: DemoSummary, drew: bool) -> Figure:
    """The input marks, a legend if anything is labelled, or "no data" when no series had a point.

    The legend sits outside the axes (to the right) so it never hides a series, and is the figure's
    so that a second y axis (``twinx``) contributes its lines too.
    """
    if not drew:
        no_data(ax)
    mark_input(ax, summary)
    if any(a.get_legend_handles_labels()[0] for a in fig.axes):
        fig.legend(loc="outside right upper", fontsize="small")
    return fig


def limit_lines(ax: Axes, values: Iterable[float], text: str) -> None:
    """A dashed horizontal line per distinct limit (both runs usually share one)."""
    for i, v in enumerate(sorted(set(values))):
        ax.axhline(v, color="black", linestyle="--", linewidth=1, label=f"{text} {v:g}" if i == 0 else None)


# --- the plots --------------------------------------------------------------------------------


def each_run(ax: Axes, summary: DemoSummary, series: str, step: bool = False, **style: Any) -> bool:
    """One line per run of ``series``' first value column (a step line for a setting in force until
    the next); whether anything was drawn."""
    drew = False
    for name, run in runs_in_order(summary):
        t, v = column(getattr(run, series), 1)
        if t:
            draw = partial(ax.step, where="post") if step else ax.plot
            draw(t, v, color=colour(name), label=label(name), **style)
            drew = True
    return drew


def imbalance_figure(summary: DemoSummary) -> Figure:
    fig, ax = new_axes("Load imbalance per interval", "max / mean records per worker")
    drew = each_run(ax, summary, "imbalance", marker=".")
    limit_lines(ax, (1 + r.theta for r in summary.runs.values()), "1 + theta =")
    return finish(fig, ax, summary, drew)


def batches_figure(summary: DemoSummary) -> Figure:
    fig, ax = new_axes("Reduce micro-batch duration", "duration (ms)")
    return finish(fig, ax, summary, each_run(ax, summary, "batches", marker=".", linewidth=1))


def migrations_figure(summary: DemoSummary) -> Figure:
    fig, ax = new_axes("Ballast: routing table and migrations", "keys")
    run = summary.runs.get(BALLAST)
    t, size = column(run.table if run else [], 2)
    if t:
        ax.step(t, size, where="post", color="tab:blue", label="pinned keys in the table")
    phases = migration_phases(run.migrations if run else [])
    for phase, rows in phases.items():
        marker, c = PHASE_MARKERS.get(phase, ("s", "tab:purple"))
        mt, keys = zip(*rows, strict=True)
        ax.scatter(mt, keys, marker=marker, color=c, zorder=3, label=f"migration {phase} (keys moved)")
    return finish(fig, ax, summary, bool(t or phases))


def migration_phases(migrations: Iterable[Sequence[Any]]) -> dict[str, list[tuple[float, float]]]:
    """``[t_s, epoch, phase, keys]`` rows by phase, as ``(t, keys moved)``; keys may be a list."""
    out: dict[str, list[tuple[float, float]]] = {}
    for row in migrations:
        if len(row) < 4 or row[0] is None:
            continue
        keys = row[3]
        n = len(keys) if isinstance(keys, (list, tuple)) else float(keys or 0)
        out.setdefault(str(row[2]).upper(), []).append((float(row[0]), n))
    return out


def lag_figure(summary: DemoSummary) -> Figure:
    fig, ax = new_axes("Time lag by stage", "lag (s)")
    drew = False
    for name, run in runs_in_order(summary):
        for t, v, style, what in lag_lines(run):
            ax.plot(t, v, linestyle=style, color=colour(name), label=f"{label(name)}: {what}")
            drew = True
    limit_lines(ax, (r.target_s for r in summary.runs.values()), "target")
    return finish(fig, ax, summary, drew)


def lag_lines(run: RunSummary) -> list[tuple[list[float], list[float], str, str]]:
    """Router, reduce and (where both were measured) pipeline lag: the sum is what a result waits."""
    lines = []
    for rows, index, style, what in ((run.pipeline_lag(), 1, "-", "pipeline"), (run.lag, 1, ":", "router"),
                                     (run.lag, 2, "--", "reduce")):  # fmt: skip
        t, v = column(rows, index)
        if t:
            lines.append((t, v, style, what))
    return lines


def keep_figure(summary: DemoSummary) -> Figure:
    fig, ax = new_axes("Keep-probability of the input stream", "keep probability")
    drew = each_run(ax, summary, "keep", step=True)
    ax.set_ylim(-0.02, 1.05)
    return finish(fig, ax, summary, drew)


def error_figure(summary: DemoSummary) -> Figure:
    fig, ax = new_axes("Ballast: result error of shed windows", "mean relative error")
    run = summary.runs.get(BALLAST)
    rows = run.result_error if run else []
    t, err = column(rows, 3)
    if t:
        ax.plot(t, err, marker="o", color="tab:blue", label="mean relative error")
    ct, covered = column(rows, 4)
    if ct:
        right = ax.twinx()
        right.plot(ct, covered, marker="s", linestyle="--", color="tab:green", label="truth in the interval")
        right.set_ylabel("share with the truth in the interval", color="tab:green")
        right.set_ylim(-0.02, 1.05)
    return finish(fig, ax, summary, bool(t or ct))


PLOTS: tuple[Plot, ...] = (
    Plot("imbalance.png", "Load imbalance", "Max/mean records per worker in each interval: 1 is perfectly "
         "even; the loop should bring Ballast back under the dashed 1 + theta line after each dotted "
         "shift, while hash only stays above it.", imbalance_figure),
    Plot("batches.png", "Micro-batch duration", "How long each reduce micro-batch took: a hot worker "
         "shows as long batches; the shaded span is the burst.", batches_figure),
    Plot("migrations.png", "Routing table and migrations", "Ballast's pinned keys after each routing "
         "update (step line) and each migration step, placed at the keys it moved.", migrations_figure),
    Plot("lag.png", "Time lag", "How far behind each stage runs: router (dotted), reduce (dashed) and "
         "their sum, the pipeline (solid); it should come back under the dashed target after the burst.",
         lag_figure),
    Plot("keep.png", "Keep-probability", "The share of input the routers keep: 1 is no shedding; Ballast "
         "sheds during the burst and lifts it after, hash only never sheds.", keep_figure),
    Plot("error.png", "Result error", "For windows that lost input to shedding: their mean relative "
         "error (left axis) and the share whose interval held the true value (right axis).",
         error_figure),
)  # fmt: skip


def save_plots(summary: DemoSummary, folder: Path) -> list[Path]:
    """Draw and save every plot as PNG in ``folder``; returns the files in report order."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for plot in PLOTS:
        path = folder / plot.file
        plot.draw(summary).savefig(path, format="png")
        written.append(path)
    return written
