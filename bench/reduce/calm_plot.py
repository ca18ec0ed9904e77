"""``reduce-calm.png``: where a calm micro-batch's time and CPU go (from the report alone)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axs = plt.subplots(1, 3, figsize=(17, 4.6))
    d = report["durations_ms_median"]
    axs[0].barh(list(d), list(d.values()), color="tab:blue")
    axs[0].set_title(f"batch durations, median of {report['batches']} (ms)")
    cores = report["cpu_cores"]
    axs[1].bar(list(cores), list(cores.values()), color=["tab:gray", "tab:orange", "tab:green"][: len(cores)])
    axs[1].set_title("CPU by process (cores, over the measured span)")
    threads = report["jvm_threads_cores"]
    axs[2].barh(list(threads)[::-1], list(threads.values())[::-1], color="tab:orange")
    axs[2].set_title("the JVM's CPU by thread group (cores)")
    p = report["params"]
    fig.suptitle(
        f"{report['command']}: {p['calm_rate']:.0f} events/s, {p['calm_workers']} workers, trigger "
        f"{report['trigger_ms']} ms, {report['measured_s']:.0f} s measured",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
