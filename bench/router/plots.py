"""The router benches' one figure: two delivery modes side by side, a column of points per variant.

Why shared: `make bench-router-compare` (two commits) and `make bench-router-secured` (two stacks)
draw the same picture, at-least-once and exactly-once each with its variants' runs as points and a
median mark, and each kept its own copy of the layout.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path

MODES = (("alo", "at-least-once"), ("eos", "exactly-once"))


def two_mode_scatter(
    points: Mapping[str, Mapping[str, Sequence[float]]],
    labels: Mapping[str, str],
    path: Path,
    *,
    ylabel: str,
    title: str,
    notes: Mapping[str, str] | None = None,
) -> None:
    """``points[mode][variant]``: the runs' values; ``labels[variant]``: its legend (variants in
    ``labels``' order); ``notes[mode]``: a line written under the mode's columns (a ratio)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for i, (mode, _name) in enumerate(MODES):
        for j, variant in enumerate(labels):
            ys = list(points.get(mode, {}).get(variant, ()))
            x = i * 3 + j
            ax.scatter([x] * len(ys), ys, color=f"C{j}", label=labels[variant] if i == 0 else None)
            if ys:
                ax.hlines(statistics.median(ys), x - 0.3, x + 0.3, color=f"C{j}")
        if notes and mode in notes:
            ax.annotate(notes[mode], (i * 3 + 0.5, 0), xytext=(0, 5), textcoords="offset points", ha="center")
    ax.set_xticks([0.5, 3.5], [name for _mode, name in MODES])
    ax.set_ylabel(ylabel)
    ax.set_ylim(bottom=0)
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
