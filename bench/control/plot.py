"""control.png: the latency's distribution per case, and where its median and p99 go.

Why two panels: the CDF shows the whole spread (a target is about the tail), the bars show which
part of the path (the control commit, the router, the markers' commit) the time is spent in.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from bench.control.params import TARGET_P99_MS

PARTS = ("control", "router", "commit")


def plot(cases: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (cdf, bars) = plt.subplots(1, 2, figsize=(11, 4.2))
    labels = [f"{c['routers']} router{'s' if c['routers'] > 1 else ''}, {c['load']}" for c in cases]
    for c, label in zip(cases, labels, strict=True):
        total = np.sort([s["total"] for s in c["samples"]])
        cdf.plot(total, np.arange(1, len(total) + 1) / len(total), label=label)
    cdf.axvline(TARGET_P99_MS, color="grey", linestyle="--", linewidth=1)
    cdf.axhline(0.99, color="grey", linestyle=":", linewidth=1)
    cdf.set_xscale("log")
    cdf.set_xlabel("control append → marker visible everywhere (ms)")
    cdf.set_ylabel("fraction of events")
    cdf.set_title("Control latency")
    cdf.legend(fontsize=8)
    x = np.arange(len(cases))
    for offset, stat in ((-0.2, "p50"), (0.2, "p99")):
        bottom = np.zeros(len(cases))
        for i, part in enumerate(PARTS):
            heights = np.array([c["split_ms"][part][stat] for c in cases])
            bars.bar(
                x + offset,
                heights,
                0.38,
                bottom=bottom,
                color=f"C{i}",
                label=part if stat == "p50" else None,
                alpha=1.0 if stat == "p50" else 0.55,
            )
            bottom += heights
    bars.set_xticks(x, [label.replace(", ", "\n") for label in labels], fontsize=8)
    bars.set_ylabel("ms (left bar: p50 of each part, right: p99)")
    bars.set_title("Where the time goes")
    bars.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
