"""``reduce.png``: the placements' batch durations and loads, (c)'s migrations, uniform throughput.

Why from the report alone: a JSON of an earlier run can be drawn again without running anything.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axs = plt.subplots(1, 4, figsize=(22, 4.8))
    colors = {"a": "tab:gray", "b": "tab:red", "c": "tab:blue", "ua": "tab:gray", "ub": "tab:red"}
    per_phase = report["params"]["slices"]
    for name, r in report["results"].items():
        rows = [b for b in report["batches"][name] if b["kind"] == "slice" and not b["split"]]
        x = np.arange(len(rows))
        style = {"ms": 3, "color": colors[name], "label": r["placement"]}
        axs[0].plot(x, [b["duration_ms"] / 1000 for b in rows], "o-", **style)
        records = [b["worker_records"] for b in rows]
        axs[1].plot(x, [max(w) / np.mean(w) if sum(w) else np.nan for w in records], "o-", **style)
    for ax, title, ylabel in (
        (axs[0], "micro-batch duration (full slices)", "s"),
        (axs[1], "per-worker load max/mean (records) per batch", "max/mean"),
    ):
        for edge in range(per_phase, per_phase * report["params"]["phases"], per_phase):
            ax.axvline(edge - 0.5, color="0.8", lw=1)
        ax.set_title(title)
        ax.set_xlabel(f"full-slice batch ({per_phase} per phase; the hot set shifts at the grey lines)")
        ax.set_ylabel(ylabel)
        ax.legend(fontsize=8)
    if "c" in report["results"]:
        rows = [b for b in report["batches"]["c"] if b["kind"] in ("prefix", "slice", "partial")]
        moving = [bool(b["chunks_sent"] or b["chunks_installed"] or b["held"] or b["pending"]) for b in rows]
        after = [False, *moving[:-1]]
        color = [
            "tab:orange" if m else "navajowhite" if a else "tab:blue"
            for m, a in zip(moving, after, strict=True)
        ]
        x = np.arange(len(rows))
        axs[2].bar(x, [b["latency_p99_ms"] / 1000 for b in rows], color=color, label="flow latency p99")
        axs[2].plot(x, [b["duration_ms"] / 1000 for b in rows], "k.-", ms=3, label="batch duration")
        axs[2].set_title(
            "(c) keys not moved: flow latency p99 per batch\n(orange: migration under way, light: after one)"
        )
        axs[2].set_xlabel("batch (prefixes included)")
        axs[2].set_ylabel("s")
        axs[2].legend(fontsize=8)
    uni = report["uniform"]
    if uni:
        names = list(uni)
        rates = [uni[n]["records_per_s"] for n in names]
        axs[3].bar(range(len(names)), rates, color=[colors[n] for n in names])
        for i, v in enumerate(rates):
            axs[3].annotate(f"{v:,.0f}", (i, v), ha="center", va="bottom", fontsize=9)
        axs[3].set_title("uniform keys, no record cost: records/s")
        axs[3].set_xticks(range(len(names)), [uni[n]["placement"] for n in names], fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
