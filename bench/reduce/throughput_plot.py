"""``reduce-native.png``: records/s per contender and key distribution, the paired ratios per
round, the steady batches' durations, and the CPU a record costs by process kind.

Why from the report alone: a JSON of an earlier run can be drawn again without running anything.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

COLORS = {
    "ballast": "tab:blue",
    "native-rocksdb": "tab:orange",
    "native-hdfs": "tab:gray",
    "partition-stage": "tab:green",
    "partition-stage-direct": "tab:olive",
    "partition-stage-eos": "tab:cyan",
}
KINDS = ("driver", "jvm", "python_workers")


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    dists = report["distributions"]
    names = list(dists)
    contenders = list(dict.fromkeys(c for d in dists.values() for c in d["contenders"]))
    fig, axs = plt.subplots(1, 4, figsize=(22, 4.8))
    width = 0.8 / max(1, len(contenders))
    for j, c in enumerate(contenders):
        for i, name in enumerate(names):
            row = dists[name]["contenders"].get(c)
            if row is None:
                continue
            x = i + (j - (len(contenders) - 1) / 2) * width
            axs[0].bar(
                x,
                row["records_per_s_median"],
                width,
                color=COLORS.get(c),
                label=row["label"] if i == 0 else None,
            )
            axs[0].plot([x] * len(row["records_per_s"]), row["records_per_s"], "k.", ms=4)
            cpu = row["cpu_s_per_batch_median"]
            bottom = 0.0
            for k, hatch in zip(KINDS, ("", "//", ".."), strict=True):
                per_record = cpu.get(k, 0.0) / report["params"]["tp_cap"] * 1e6
                label = k if (i == 0 and j == 0) else None
                axs[3].bar(
                    x,
                    per_record,
                    width,
                    bottom=bottom,
                    color=COLORS.get(c),
                    hatch=hatch,
                    edgecolor="k",
                    label=label,
                )
                bottom += per_record
    axs[0].set_xticks(range(len(names)), names)
    axs[0].set_title("records/s (bars: median of rounds, dots: each round)")
    axs[0].legend(fontsize=8)
    for name, marker in zip(names, ("o", "s", "^", "v"), strict=False):
        for key in sorted({k for p in dists[name]["rounds"] for k in p if "_over_" in k}):
            values = [p.get(key) for p in dists[name]["rounds"]]
            axs[1].plot(
                range(1, len(values) + 1),
                values,
                marker=marker,
                label=f"{name}: {key.replace('_over_', ' ÷ ')}",
            )
    axs[1].axhline(1.0, color="0.6", lw=1)
    axs[1].set_title("Ballast (or the prototype) ÷ native records/s, paired per round")
    axs[1].set_xlabel("round")
    axs[1].legend(fontsize=8)
    warmup, cap = report["params"]["tp_warmup_batches"], report["params"]["tp_cap"]
    for i, name in enumerate(names):
        for j, c in enumerate(contenders):
            durations = [
                b["duration_ms"] / 1000
                for run in dists[name]["runs"]
                if run["contender"] == c
                for b in dists[name]["batches"][run["job"]]
                if b["id"] >= warmup and b["rows"] >= 0.9 * cap
            ]
            if durations:
                x = i + (j - (len(contenders) - 1) / 2) * width
                jitter = np.random.default_rng(j).uniform(-width / 3, width / 3, len(durations))
                axs[2].plot(x + jitter, durations, ".", color=COLORS.get(c), ms=4)
    axs[2].set_xticks(range(len(names)), names)
    axs[2].set_title(f"steady batch duration, s ({cap:,} records a batch)")
    axs[3].set_xticks(range(len(names)), names)
    axs[3].set_title("CPU µs per record by process (median of rounds)")
    axs[3].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
