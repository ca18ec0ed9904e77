"""The demo's report folder: ``summary.json``, the plots, and an ``index.html`` that shows both.

Why one self-contained page (inline CSS, no scripts, no fonts, images next to it): a user opens it
from disk after ``make demo``, often offline or from a CI artefact, so it must load nothing from the
network and show the verdict before anything else. Every piece of text is escaped: verdict details
and failure reasons carry service output, which may hold ``<`` or ``&``.
"""

from __future__ import annotations

import math
import time
from html import escape
from pathlib import Path
from typing import Any

from services.demo.plots import PLOTS, label, runs_in_order, save_plots
from services.demo.summary import DemoSummary, RunSummary

SUMMARY_FILE = "summary.json"
INDEX_FILE = "index.html"
FAILURE_KEYS = ("service", "reason", "log")  # shown first, in this order; any others after

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1000px; color: #222; }
h1 .pass { color: #1a7f37; } h1 .fail { color: #cf222e; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; }
th, td { border: 1px solid #d0d7de; padding: 0.3em 0.6em; text-align: left; vertical-align: top; }
th { background: #f6f8fa; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.PASS { color: #1a7f37; font-weight: bold; } .FAIL { color: #cf222e; font-weight: bold; }
.failure { border: 2px solid #cf222e; background: #ffebe9; padding: 0.5em 1em; margin: 1em 0; }
figure { margin: 1.5em 0; } figure img { max-width: 100%; border: 1px solid #d0d7de; }
figcaption { color: #555; margin-top: 0.3em; }
"""


def write_report(summary: DemoSummary, folder: Path) -> Path:
    """Write summary.json, the PNGs and index.html into ``folder``; returns the index.html path."""
    folder.mkdir(parents=True, exist_ok=True)
    summary.write(folder / SUMMARY_FILE)
    images = [p.name for p in save_plots(summary, folder)]
    index = folder / INDEX_FILE
    index.write_text(render_html(summary, images), encoding="utf-8")
    return index


def render_html(summary: DemoSummary, images: list[str]) -> str:
    """The page for ``summary``, showing the plot files ``images`` (names relative to the page)."""
    outcome = "PASS" if summary.ok else "FAIL"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<link rel="icon" href="data:,">',  # no favicon request: none exists next to the page
        f"<title>Ballast demo: {outcome}</title><style>{STYLE}</style></head><body>",
        f'<h1>Ballast demo: <span class="{outcome.lower()}">{outcome}</span></h1>',
        f"<p>{escape(when(summary))}</p>",
        "<h2>Verdict</h2>",
        verdicts_html(summary),
        failure_html(summary.failure),
        *(run_html(run) for _, run in runs_in_order(summary)),
        "<h2>Settings</h2>",
        table_html(summary.settings),
        "<h2>Plots</h2>",
        plots_html(images),
        "</body></html>",
    ]
    return "\n".join(p for p in parts if p) + "\n"


def when(summary: DemoSummary) -> str:
    if not summary.started_at:
        return f"Ran {summary.duration_s:.0f} s."
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(summary.started_at))
    return f"Started {started}, ran {summary.duration_s:.0f} s."


def verdicts_html(summary: DemoSummary) -> str:
    if not summary.verdicts:
        return "<p>No checks were made.</p>"
    rows = [
        f'<tr><td>{escape(v.check)}</td><td class="{word}">{word}</td><td>{escape(v.detail)}</td></tr>'
        for v in summary.verdicts
        for word in ["PASS" if v.ok else "FAIL"]
    ]
    head = "<tr><th>check</th><th>result</th><th>detail</th></tr>"
    return '<table class="verdicts">' + head + "".join(rows) + "</table>"


def failure_html(failure: dict[str, str] | None) -> str:
    """A box naming the service that failed, why, and its log: the first thing to open next."""
    if not failure:
        return ""
    keys = [k for k in FAILURE_KEYS if k in failure] + [k for k in failure if k not in FAILURE_KEYS]
    lines = "".join(f"<li><b>{escape(k)}</b>: {escape(str(failure[k]) or '–')}</li>" for k in keys)
    return f'<div class="failure"><h2>The demo did not finish</h2><ul>{lines}</ul></div>'


def run_html(run: RunSummary) -> str:
    loop = "rebalancing loop " + ("on" if run.rebalance else "off")
    shed = "shedding " + ("on" if run.shedding else "off")
    title = f"<h2>Run: {escape(label(run.name))}</h2><p>{escape(loop)}, {escape(shed)}.</p>"
    return title + (table_html(run.figures) if run.figures else "<p>No figures were recorded.</p>")


def table_html(values: dict[str, Any]) -> str:
    rows = "".join(
        f"<tr><th>{escape(str(k))}</th><td{numeric(v)}>{escape(cell(v))}</td></tr>" for k, v in values.items()
    )
    return f"<table>{rows}</table>" if rows else "<p>None.</p>"


def numeric(value: Any) -> str:
    is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
    return ' class="num"' if is_number else ""


def cell(value: Any) -> str:
    """A figure as a reader wants it: thousands separated, floats to a few significant digits."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return number(value)
    if isinstance(value, (list, tuple)):
        return ", ".join(cell(v) for v in value)
    if isinstance(value, dict):
        return "; ".join(f"{k}: {cell(v)}" for k, v in value.items())
    return str(value)


def number(x: float) -> str:
    """Whole numbers without a point (JSON turns some ints into floats), others to 3 significant digits."""
    if not math.isfinite(x):
        return str(x)
    if x.is_integer() or abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:.3g}"


def plots_html(images: list[str]) -> str:
    captions = {p.file: p for p in PLOTS}
    out = []
    for name in images:
        plot = captions.get(name)
        title, caption = (plot.title, plot.caption) if plot else (name, "")
        out.append(
            f'<figure><img src="{escape(name)}" alt="{escape(title)}">'
            f"<figcaption><b>{escape(title)}.</b> {escape(caption)}</figcaption></figure>"
        )
    return "\n".join(out)
