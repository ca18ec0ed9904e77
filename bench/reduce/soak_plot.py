"""``reduce-soak.png``: per batch of the soak, its duration, the state kept against the windows
it should hold, the bytes per state row, and the engine's time per record.

Why from the report alone: a JSON of an earlier run can be drawn again without running anything.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in report["batches"] if r["rows"]]
    v = report["verdict"]
    x = [r["id"] for r in rows]
    fig, axs = plt.subplots(1, 4, figsize=(22, 4.8))
    panels = (
        (axs[0], [r["duration_ms"] / 1000 for r in rows], "batch duration, s"),
        (axs[1], [r["state_keys"] / 1000 for r in rows], "state rows kept, thousands (all workers)"),
        (axs[2], [r["bytes_per_state_key"] for r in rows], "state bytes per row"),
        (axs[3], [r["engine_us_per_record"] for r in rows], "engine µs per record (WorkerStats.busy_ms)"),
    )
    for ax, y, title in panels:
        ax.plot(x, y, ".-", ms=3)
        ax.set_title(title)
        ax.set_xlabel("batch")
        if "warmup_batches" in v:
            ax.axvspan(-0.5, v["warmup_batches"] - 0.5, color="0.92", label="warm-up")
        for key, color in (("early_batches", "tab:green"), ("late_batches", "tab:red")):
            if v.get(key):
                ax.axvspan(
                    v[key][0] - 0.5, v[key][-1] + 0.5, color=color, alpha=0.12, label=key.replace("_", " ")
                )
    per_window = [r["state_keys_per_window"] / 1000 if r["state_keys_per_window"] else None for r in rows]
    twin = axs[1].twinx()
    twin.plot(x, per_window, "g.", ms=3)
    twin.set_ylabel("per retained window, thousands (green)")
    axs[0].legend(fontsize=8)
    fig.suptitle(f"soak: {report['distinct_keys']:,} distinct keys, {v.get('summary', '')}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
