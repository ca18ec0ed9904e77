"""``scaling.png``: per policy, over the run's time (seconds from the input's start):

1. the reduce's hashed workers in force (from the control log) and the input rate (× one instance's
   capacity), the steps dotted;
2. the input rate and the reduce's capacity as the controller measured it (its true rate per
   worker × the workers in force), records/s;
3. the pipeline's exact time lag (router + reduce), the target dashed;
4. the keep-probability the shedder had in force.

Drawn from the report alone, so an earlier JSON can be drawn again (:func:`redraw`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

COLORS = {"ds2": "tab:blue", "busy-time": "tab:orange", "fixed-max": "tab:gray"}


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = {k: r for k, r in report["policies"].items() if "error" not in r}
    fig, axes = plt.subplots(4, 1, figsize=(11, 12), sharex=True)
    target = report["params"]["target_s"]
    for name, r in runs.items():
        c = COLORS.get(name)
        t = [s["t_s"] for s in r["samples"]]
        axes[0].step(t, [s["workers"] for s in r["samples"]], where="post", color=c, label=f"{name}: workers")
        measured = [(s["t_s"], s["true_rate"] * s["workers"]) for s in r["samples"] if s.get("true_rate")]
        if measured:
            axes[1].plot([x for x, _ in measured], [y for _, y in measured], color=c,
                         label=f"{name}: true rate × workers")  # fmt: skip
        axes[2].plot(
            t, [(s["router_s"] or 0) + (s["reduce_s"] or 0) for s in r["samples"]], color=c, label=name
        )
        keeps = [(0.0, 1.0)] + [(k["t_s"], k["keep"]) for k in r["keeps"]]
        axes[3].step([x for x, _ in keeps] + [t[-1] if t else 0], [y for _, y in keeps] + [keeps[-1][1]],
                     where="post", color=c, label=name)  # fmt: skip
    first = next(iter(runs.values()), None)
    if first is not None:
        ax = axes[0].twinx()
        for s in first["steps"]:
            ax.hlines(s["times"], s["start_s"], s["end_s"], colors="black", linestyles="dotted")
        ax.set_ylabel("input (× one instance)")
        unit = report["params"]["unit_rate"]
        for s in first["steps"]:
            axes[1].hlines(s["times"] * unit, s["start_s"], s["end_s"], colors="black", linestyles="dotted")
    axes[0].set_ylabel("reduce workers")
    axes[0].legend(loc="upper left", fontsize=8)
    axes[1].set_ylabel("records/s (input dotted)")
    axes[1].legend(loc="upper left", fontsize=8)
    axes[2].axhline(target, color="black", linestyle="--", linewidth=1)
    axes[2].set_ylabel("time lag (s)")
    axes[2].legend(fontsize=8)
    axes[3].set_ylabel("keep-probability")
    axes[3].set_xlabel("seconds from the input's start")
    axes[3].set_ylim(0, 1.05)
    fig.suptitle("make bench-scaling: DS2, the busy-time rule and fixed-at-max on the same steps")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def redraw(json_path: str) -> None:
    p = Path(json_path)
    plot(json.loads(p.read_text()), p.with_suffix(".png"))
