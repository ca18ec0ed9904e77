"""``migration.png``: each mode's micro-batch durations over time, the migration's START and DONE marked.

Why from the report alone: a JSON of an earlier run can be drawn again without running anything
(``python -c "from bench.migration.plot import redraw; redraw('bench/results/migration.json')"``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

COLORS = {"all-at-once": "tab:red", "batched": "tab:blue", "fluid": "tab:green"}


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [r for r in report["modes"].values() if "error" not in r]
    if not runs:
        return
    fig, axs = plt.subplots(
        len(runs), 1, figsize=(12, 2.9 * len(runs)), sharex=True, sharey=True, squeeze=False
    )
    for ax, r in zip(axs[:, 0], runs, strict=True):
        story, f = r["migration"], r["figures"]
        t0 = story["start_ms"]
        color = COLORS.get(r["mode"], "tab:gray")
        rows = [b for b in r["batches"] if b["start_ms"] >= r["feed_start_ms"]]
        ax.bar(
            [(b["start_ms"] - t0) / 1000 for b in rows],
            [b["duration_ms"] / 1000 for b in rows],
            width=[max(b["duration_ms"], 1) / 1000 for b in rows],
            align="edge",
            color=color,
            alpha=0.55,
            edgecolor=color,
            linewidth=0.4,
        )
        cpu = [b for b in rows if b.get("cpu_s") is not None]
        if cpu:  # the job's own CPU seconds in each batch (a shared machine's load shows less there)
            mids = [(b["start_ms"] + b["duration_ms"] / 2 - t0) / 1000 for b in cpu]
            ax.plot(mids, [b["cpu_s"] for b in cpu], ".", color="k", ms=3)
        end = (story["end_ms"] - t0) / 1000 if story["end_ms"] else None
        ax.axvline(0, color="k", lw=1)
        ax.text(0, 1.0, " START", transform=ax.get_xaxis_transform(), va="top", fontsize=8)
        if end is not None:
            ax.axvspan(0, end, color="k", alpha=0.06)
            ax.axvline(end, color="k", lw=1, ls="--")
            ax.text(
                end, 1.0, f" {story['end_phase']}", transform=ax.get_xaxis_transform(), va="top", fontsize=8
            )
        for s in story["steps"]:  # a tick under the top edge per step sent
            ax.plot((s["at_ms"] - t0) / 1000, 0.93, marker="|", color="k", ms=7,
                    transform=ax.get_xaxis_transform())  # fmt: skip
        if f["steady_p50_ms"]:
            ax.axhline(f["steady_p50_ms"] / 1000, color="k", lw=0.8, ls=":")
        ax.set_ylabel("s")
        peak = f"{f['peak_ms'] / 1000:.1f} s" if f["peak_ms"] is not None else "-"
        ax.set_title(
            f"{r['mode']}: {f['keys']} keys in {f['steps']} steps, {f['migration_s']:.1f} s START→DONE; "
            f"peak batch {peak} vs steady p50 {(f['steady_p50_ms'] or 0) / 1000:.1f} s "
            f"({f['peak_over_steady']}x); {f['state_bytes_moved']:,} state bytes",
            fontsize=9,
        )
    axs[-1, 0].set_xlabel(
        "seconds since the migration's START (bars: batches, their duration; dots: the job's CPU seconds in "
        "each; ticks: steps sent; dotted: steady-state p50)"
    )
    p = report["params"]
    fig.suptitle(
        f"Paced migration on the Spark reduce ({report['spark_master']}, {p['processor']}, "
        f"Zipf {p['z']} over {p['keys']:,} keys at {p['rate']:,}/s)",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def redraw(json_path: str) -> None:
    p = Path(json_path)
    plot(json.loads(p.read_text()), p.with_suffix(".png"))
