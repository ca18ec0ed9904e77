"""``chaos.png``: per seed, the faults on a timeline against the pipeline's lag and the imbalance.

One panel per seed, seconds since its input started: the time lag (router + reduce, as the shedder
measured it) with the target dashed, on the left axis; the routed load's max/mean per 5 s and the
keep-probability in force, on the right axis; each fault a shaded span from its injection to its
end, labelled, with a tick where the lag was back under target; the burst hatched.

Drawn from the report alone, so an earlier JSON can be drawn again
(``python -c "from bench.chaos.plot import redraw; redraw('bench/results/chaos.json')"``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

COLORS = {"kill": "tab:red", "stop": "tab:purple", "skewed": "tab:orange", "junk": "tab:gray"}


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [r for r in report["runs"] if "series" in r]
    if not runs:
        return
    fig, axes = plt.subplots(len(runs), 1, figsize=(15, 3.2 * len(runs)), squeeze=False)
    target = report["params"]["target_s"]
    for ax, run in zip(axes[:, 0], runs, strict=True):
        _panel(ax, run, target)
    axes[-1, 0].set_xlabel("seconds since the input started")
    fig.suptitle("Fault campaign: faults (shaded, injection to end) against time lag and imbalance")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _panel(ax: Any, run: dict[str, Any], target: float) -> None:
    s = run["series"]
    t0 = run["input"]["started_ms"]
    lag = s["lag"]
    ax.plot(
        [x[0] for x in lag],
        [x[1] + x[2] for x in lag],
        color="black",
        lw=1.2,
        label="time lag (router + reduce)",
    )
    ax.axhline(target, color="black", ls="--", lw=0.8, label=f"target {target:g} s")
    ax.set_ylabel("lag (s)")
    burst = run["input"]["burst_at_s"]
    ax.axvspan(
        burst,
        burst + run["input"]["burst_s"],
        facecolor="none",
        hatch="//",
        edgecolor="tab:blue",
        lw=0,
        alpha=0.4,
        label="burst",
    )
    top = max([x[1] + x[2] for x in lag] + [target * 1.5])
    for i, f in enumerate(run.get("faults", [])):
        if not f.get("injected_at"):
            continue
        a = (f["injected_at"] - t0) / 1000
        b = ((f.get("ended_at") or f["injected_at"]) - t0) / 1000
        color = COLORS.get(f["kind"].split("-")[0], "tab:green")
        ax.axvspan(a, max(b, a + 0.5), color=color, alpha=0.25)
        ax.text(a, top * (0.95 - 0.08 * (i % 5)), f"{f['kind']} {f['target']}", fontsize=7, color=color)
        if f.get("recovery_s") is not None:
            ax.plot([b + f["recovery_s"]], [target], marker="v", color=color, ms=5)
    ax.set_ylim(0, top * 1.05)
    right = ax.twinx()
    imb = s["imbalance"]
    right.plot([x[0] for x in imb], [x[1] for x in imb], color="tab:green", lw=0.9, label="max/mean per 5 s")
    keep = s["keep"]
    if keep:
        xs = [x[0] for x in keep]
        right.step(
            [0.0, *xs, lag[-1][0] if lag else xs[-1]],
            [1.0, *[x[1] for x in keep], keep[-1][1]],
            where="post",
            color="tab:blue",
            lw=0.9,
            label="keep-probability",
        )
    right.set_ylabel("max/mean, keep")
    right.set_ylim(0, max([x[1] for x in imb] + [2.0]) * 1.1)
    r = run.get("results", {})
    ax.set_title(
        f"seed {run['seed']}: {r.get('records_lost', '?')} lost, {r.get('rows_wrong', '?')} rows wrong, "
        f"{r.get('false_exact', '?')} false exact, {r.get('late_records', '?')} late",
        fontsize=9,
    )
    lines = ax.get_legend_handles_labels()
    more = right.get_legend_handles_labels()
    ax.legend(
        lines[0] + more[0], lines[1] + more[1], fontsize=7, loc="upper left", bbox_to_anchor=(1.06, 1.0)
    )


def redraw(json_path: str) -> None:
    path = Path(json_path)
    plot(json.loads(path.read_text()), path.with_suffix(".png"))
