"""``shed.png``: time lag, keep-probability and result error over time, shedding on and off.

Three panels on one time axis (seconds from the overload's start, the overload shaded):

1. the pipeline's exact time lag (router + reduce) of each case, the target dashed;
2. the keep-probability in force for the input topic (shedding on), as the control log ordered it;
3. per window (by its start), the estimates' median relative error against the truth, the error
   the rows reported (mean ``relative_error``), and the share of the window's rows that were shed.

Why from the report alone: a JSON of an earlier run can be drawn again without running anything
(``python -c "from bench.shed.plot import redraw; redraw('bench/results/shed.json')"``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.shed.verdicts import pipeline_lag

COLORS = {"on": "tab:blue", "off": "tab:red"}


def series(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per case that ran, its curves on the time axis of its own overload's start (seconds)."""
    out = {}
    for name, r in report["cases"].items():
        if "error" in r:
            continue
        t0 = r["phase_starts_ms"]["overload"]
        curves: dict[str, Any] = {
            "lag": [((at - t0) / 1000, v) for at, v in pipeline_lag(r["lag_samples"])],
            "overload_end_s": (r["phase_starts_ms"]["recover"] - t0) / 1000,
            "keep": [((k["at_ms"] - t0) / 1000, k["keep"]) for k in r.get("keeps", [])],
        }
        w = report["params"]["window_ms"]
        rows = r.get("error_over_time") or []
        curves["error"] = [
            ((x["window_start"] + w / 2 - t0) / 1000, x["count_error_p50"], x["sum_error_p50"],
             x["reported_error_mean"], x["shed"] / x["windows"] if x["windows"] else 0.0)
            for x in rows
        ]  # fmt: skip
        out[name] = curves
    return out


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = series(report)
    if not curves:
        return
    p = report["params"]
    fig, (lag_ax, keep_ax, err_ax) = plt.subplots(3, 1, figsize=(12, 9), sharex=True)
    end = max(c["overload_end_s"] for c in curves.values())
    for ax in (lag_ax, keep_ax, err_ax):
        ax.axvspan(0, end, color="k", alpha=0.06)
        ax.grid(alpha=0.3)
    for name, c in curves.items():
        color = COLORS.get(name, "tab:gray")
        if c["lag"]:
            lag_ax.plot(*zip(*c["lag"], strict=True), color=color, lw=1.2, label=f"shedding {name}")
        if name == "on":
            steps = [(min(t for t, _ in c["lag"]) if c["lag"] else 0.0, 1.0), *c["keep"]]
            last = max(t for t, _ in c["lag"]) if c["lag"] else end
            xs = [t for t, _ in steps] + [last]
            ys = [k for _, k in steps] + [steps[-1][1]]
            keep_ax.step(xs, ys, where="post", color=color, lw=1.5, label="keep-probability in force")
        if c["error"]:
            t, count_err, sum_err, reported, shed = zip(*c["error"], strict=True)
            style = {"on": "-", "off": ":"}.get(name, "-")
            err_ax.plot(t, [x or 0 for x in count_err], style, color=color, marker=".", ms=3,
                        label=f"{name}: count, |estimate - truth| / truth (median)")  # fmt: skip
            err_ax.plot(t, [x or 0 for x in sum_err], style, color=color, alpha=0.5, marker="x", ms=3,
                        label=f"{name}: sum, median")  # fmt: skip
            err_ax.plot(t, [x or 0 for x in reported], "--", color="k", lw=0.8,
                        label=f"{name}: relative_error reported (mean)")  # fmt: skip
            if name == "on":
                keep_ax.plot(t, shed, ".", color="tab:orange", ms=4, label="share of windows shed (by start)")
    lag_ax.axhline(p["target_s"], color="k", ls="--", lw=0.8, label=f"target {p['target_s']:g} s")
    lag_ax.set_ylabel("time lag, router + reduce (s)")
    lag_ax.set_ylim(bottom=0)
    keep_ax.set_ylabel("keep-probability")
    keep_ax.set_ylim(-0.05, 1.05)
    err_ax.set_ylabel("relative error per window")
    err_ax.set_xlabel(f"seconds from the overload's start (shaded: input at {p['over_rate']:g}x capacity)")
    for ax, where, size in (
        (lag_ax, "upper left", 8),
        (keep_ax, "lower left", 8),
        (err_ax, "upper right", 7),
    ):
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc=where, fontsize=size)
    on = report["cases"].get("on", {})
    cov = on.get("coverage")
    capacity = (report.get("calibration") or {}).get("capacity", p["capacity"])
    title = f"bench-shed: capacity {capacity} records/s"
    if cov:
        title += (f"; 95% interval coverage of shed windows: count {cov['count']}, sum {cov['sum']} "
                  f"(n={cov['shed_windows']})")  # fmt: skip
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def redraw(json_path: str) -> None:
    path = Path(json_path)
    plot(json.loads(path.read_text()), path.with_suffix(".png"))
