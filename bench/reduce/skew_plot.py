"""``reduce-skew.png``: records/s per contender and skew (each seed a dot), Ballast ÷ the best
peer per seed, CPU µs per record, and the paced runs' latency p50 and p99.

Why from the report alone: a JSON of an earlier run can be drawn again without running anything.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

COLORS = {
    "ballast": "tab:blue",
    "ballast-routed": "tab:cyan",
    "ballast-2w": "tab:green",
    "peer-1s": "tab:red",
    "peer-4s": "tab:orange",
    "peer-8s": "tab:brown",
    "apply-1s": "tab:purple",
    "apply-4s": "tab:pink",
    "apply-8s": "tab:gray",
}


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    skews = report["skews"]
    contenders = list(dict.fromkeys(c for sk in skews for c in sk["contenders"]))
    fig, axs = plt.subplots(1, 4, figsize=(22, 4.8))
    width = 0.8 / max(1, len(contenders))
    labelled: set[str] = set()  # each contender named once in a legend, where it first shows
    for j, c in enumerate(contenders):
        for i, sk in enumerate(skews):
            row = sk["contenders"].get(c)
            if row is None:
                continue
            x = i + (j - (len(contenders) - 1) / 2) * width
            label = row["label"] if c not in labelled else None
            labelled.add(c)
            axs[0].bar(x, row["records_per_s_median"], width, color=COLORS.get(c), label=label)
            axs[0].plot([x] * len(row["records_per_s"]), row["records_per_s"], "k.", ms=4)
            axs[2].bar(x, row["cpu_us_per_record_median"] or 0, width, color=COLORS.get(c))
    ticks = [f"z = {sk['z']:g}" for sk in skews]
    for ax in (axs[0], axs[2]):
        ax.set_xticks(range(len(skews)), ticks)
    axs[0].set_ylabel("records/s at the cap (median over seeds)")
    axs[0].margins(y=0.4)  # room for the legend above the bars
    axs[0].legend(fontsize=8)
    axs[0].set_title(
        f"per-key work, {report['params']['sk_cost_us']:g} µs {report['params']['sk_cost_kind']}/record"
    )
    for i, sk in enumerate(skews):
        for r in sk["ballast_over_best_peer"]:
            subject = r.get("subject", "ballast")
            label = f"{subject} ÷ best peer" if f"ratio {subject}" not in labelled else None
            labelled.add(f"ratio {subject}")
            axs[1].plot([i], [r["ratio"]], "o", color=COLORS.get(subject), label=label)
        if sk["ballast_over_best_peer_median"] is not None:
            axs[1].plot([i - 0.2, i + 0.2], [sk["ballast_over_best_peer_median"]] * 2, "k-")
    axs[1].axhline(1.0, color="gray", lw=0.8)
    axs[1].axhline(1.3, color="tab:green", lw=0.8, ls="--", label="goal 1.3")
    axs[1].set_xticks(range(len(skews)), ticks)
    axs[1].set_ylabel("Ballast ÷ best peer (per seed; line: median)")
    axs[1].legend(fontsize=8)
    axs[2].set_ylabel("CPU µs per record (all processes)")
    paced = list(dict.fromkeys(c for sk in skews for c in sk.get("paced", {})))
    pw = 0.8 / max(1, len(paced))
    for j, c in enumerate(paced):
        for i, sk in enumerate(skews):
            row = sk.get("paced", {}).get(c)
            if row is None:
                continue
            x = i + (j - (len(paced) - 1) / 2) * pw
            label = row["label"] if f"paced {c}" not in labelled else None
            labelled.add(f"paced {c}")
            axs[3].bar(x, row["latency_p99_ms_median"] / 1000, pw, color=COLORS.get(c), label=label)
            axs[3].plot([x - pw / 3, x + pw / 3], [row["latency_p50_ms_median"] / 1000] * 2, "k-")
    axs[3].set_xticks(range(len(skews)), ticks)
    axs[3].set_ylabel("latency at a fixed rate, s (bar p99, line p50)")
    if paced:
        axs[3].margins(y=0.4)
        axs[3].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
