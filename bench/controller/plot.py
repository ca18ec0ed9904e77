"""bench/results/controller.png: realized max/mean and state moved per workload and policy, per trigger,
the forecast's paired difference from the last interval with its 95 % interval, and one trace interval
by interval."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bench.controller.loop import POLICIES

COLORS = {"hash": "#999999", "last": "#d62728", "forecast": "#1f77b4", "oracle": "#2ca02c"}
VERDICT_COLORS = {"ahead": "#1f77b4", "level": "#7f7f7f", "behind": "#d62728"}


def plot(out: dict, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    table = out["summary"]
    workloads = list(dict.fromkeys(r["workload"] for r in table))
    triggers = list(dict.fromkeys(r["trigger"] for r in table))
    policies = [p for p in POLICIES if any(r["policy"] == p for r in table)]
    fig, axs = plt.subplots(len(triggers), 4, figsize=(22, 4.2 * len(triggers)), squeeze=False)
    width = 0.8 / len(policies)
    x = np.arange(len(workloads))
    for row, trig in enumerate(triggers):
        ax_imb, ax_state, ax_diff, ax_trace = axs[row]
        for i, policy in enumerate(policies):
            mine = [next(r for r in table if (r["workload"], r["trigger"], r["policy"]) == (w, trig, policy))
                    for w in workloads]
            pos = x + (i - (len(policies) - 1) / 2) * width
            ax_imb.bar(pos, [r["realized_mean"] - 1 for r in mine], width, bottom=1, color=COLORS.get(policy),
                       label=policy)
            ax_imb.plot(pos, [r["realized_p95"] for r in mine], "v", color="black", markersize=4)
            ax_state.bar(pos, [r["state_moved_pct"] for r in mine], width, color=COLORS.get(policy),
                         label=policy)
        for ax, title in ((ax_imb, "realized max/mean: mean (bar), p95 (marker)"),
                          (ax_state, "state moved per interval, % of state held")):
            ax.set_xticks(x, workloads, fontsize=8)
            ax.set_title(f"{title}\ntrigger: {trig}", fontsize=9)
        ax_imb.legend(fontsize=7, ncol=2)
        paired_difference(ax_diff, out.get("acceptance", {}), workloads, trig, len(out["config"]["seeds"]))
        trace = workloads[-1]
        seed = out["config"]["seeds"][0]
        for policy in ("hash", "last", "forecast"):
            s = out["series"].get(f"{trace}/{trig}/{policy}/{seed}")
            if s:
                ax_trace.plot(s["realized"], color=COLORS[policy], lw=1, label=policy)
                marks = [t + 1 for t, r in enumerate(s["rebalanced"]) if r]
                if policy == "forecast" and marks:
                    ax_trace.plot(marks, [1.0] * len(marks), "|", color=COLORS[policy], markersize=6)
        ax_trace.set_title(f"{trace}, seed {seed}, trigger {trig}: max/mean per interval\n"
                           f"(ticks: intervals under a new forecast plan)", fontsize=9)
        ax_trace.set_xlabel("interval")
        ax_trace.legend(fontsize=7)
    fig.suptitle(f"Controller loop on the simulator ({out['command']}): plan after t, judged by t+1",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def paired_difference(ax, acceptance: dict, workloads: list[str], trigger: str, seeds: int) -> None:
    """Forecast - last per workload: the mean over seeds and its 95 % interval, coloured by verdict
    (the bars beside it cannot show a difference of 0.01 on a scale of 1)."""
    for i, w in enumerate(workloads):
        a = acceptance.get(f"{w}/{trigger}")
        if a is None:
            continue
        half = a.get("difference_ci95")
        color = VERDICT_COLORS.get(a.get("verdict", ""), "black")
        ax.errorbar(i, a["difference_mean"], yerr=half if half is not None else None, fmt="o", color=color,
                    capsize=4)
        ax.annotate(a.get("verdict", ""), (i, a["difference_mean"]), textcoords="offset points",
                    xytext=(6, 0), fontsize=7, color=color)
    ax.axhline(0, color="black", lw=0.8)
    ax.set_xticks(range(len(workloads)), workloads, fontsize=8)
    ax.set_xlim(-0.5, len(workloads) - 0.5)
    ax.set_title(f"forecast - last, realized max/mean: mean of {seeds} seeds, 95 % interval\n"
                 f"(below 0: the forecast balanced better) trigger: {trigger}", fontsize=9)
