"""``make bench-planner``: every planner over the paper's parameter space, on the interval simulator.

Modes (runtimes measured on the 2-core dev box, see docs/planners.md):

* ``--quick``  K = 1e4 configs at 20 intervals + the speed points with 3 plans each; < 1 minute.
* default      one-factor-at-a-time sweeps around the default (N=20, z=0.85, theta=0.08, K=1e4,
               w=1, f=1, beta=1.5, A_max=3000): N in {10,20,40}, z in {0.5,0.85,1.0,1.2},
               theta in {0.02,0.08,0.2}, K in {1e4,1e5,1e6}, w in {1,5}; 50 intervals; plus a
               wordfreq drift workload. Every value of every axis is covered.
* ``--full``   the Cartesian grid (3*4*3*3*2 = 216 configs x 8 planners x 50 intervals); hours.

Writes bench/results/planner.json, bench/results/routing_lookup.json and PNG plots
bench/results/planner_<axis>.png, and prints a table. Plan time is wall-clock on a shared machine:
read it as an order of magnitude.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
import routing_lookup

from ballast.planner.simulator import PLANNER_NAMES, SimConfig, make_planner, simulate
from ballast.planner.workloads import WordFreqWorkload, ZipfWorkload

RESULTS = Path(__file__).resolve().parents[1] / "results"
DEFAULT = {"N": 20, "z": 0.85, "theta": 0.08, "K": 10_000, "w": 1}
AXES = {"N": [10, 20, 40], "z": [0.5, 0.85, 1.0, 1.2], "theta": [0.02, 0.08, 0.2],
        "K": [10_000, 100_000, 1_000_000], "w": [1, 5]}
F, BETA, A_MAX, SEED = 1.0, 1.5, 3000, 1


def configs(mode: str) -> list[dict]:
    if mode == "full":
        keys = list(AXES)
        return [dict(zip(keys, vals, strict=True)) | {"workload": "zipf"}
                for vals in itertools.product(*AXES.values())]
    if mode == "quick":
        out = [DEFAULT | {"N": 40}, DEFAULT, DEFAULT | {"w": 5}, DEFAULT | {"theta": 0.02}]
        return [c | {"workload": "zipf"} for c in out]
    seen, out = set(), []
    for axis, values in AXES.items():
        for v in values:
            cfg = DEFAULT | {axis: v}
            key = tuple(sorted(cfg.items()))
            if key not in seen:
                seen.add(key)
                out.append(cfg | {"workload": "zipf"})
    out.append(DEFAULT | {"workload": "wordfreq"})
    return out


def workload_for(cfg: dict, intervals: int):
    if cfg["workload"] == "wordfreq":
        return WordFreqWorkload(num_keys=cfg["K"], num_workers=cfg["N"], mode="language",
                                total_intervals=intervals, seed=SEED)
    return ZipfWorkload(cfg["K"], cfg["z"], F, cfg["N"], seed=SEED)


def sim_config(cfg: dict, intervals: int) -> SimConfig:
    return SimConfig(num_workers=cfg["N"], theta_max=cfg["theta"], a_max=A_MAX, beta=BETA,
                     window=cfg["w"], intervals=intervals)


def speed_points(plans: int) -> list[dict]:
    """Acceptance 5: Mixed plan time at (K=1e5, N=40, theta=0.02) and (K=1e6, N=64)."""
    out = []
    for k, n, theta in ((100_000, 40, 0.02), (1_000_000, 64, 0.08), (1_000_000, 64, 0.02)):
        wl = ZipfWorkload(k, 0.85, F, n, seed=SEED)
        sc = SimConfig(num_workers=n, theta_max=theta, a_max=A_MAX, beta=BETA, window=1,
                       intervals=plans, trigger=False)
        res = simulate(wl, make_planner("Mixed", sc), sc)
        out.append({"K": k, "N": n, "theta": theta, "plans": plans,
                    "plan_time_s_mean": float(res.plan_time_s.mean()),
                    "plan_time_s_max": float(res.plan_time_s.max()),
                    "iterations_max": int(res.iterations.max()),
                    "table_size_max": float(res.table_size.max()),
                    "hot_key_infeasible_plans": int(res.hot_key_infeasible.sum())})
    return out


def acceptance(runs: list[dict], speed: list[dict], lookup: dict) -> dict:
    def find(planner: str, **cfg) -> dict | None:
        for r in runs:
            if r["planner"] == planner and r["workload"] == "zipf" and all(
                    r["config"][k] == v for k, v in (DEFAULT | cfg).items()):
                return r
        return None

    acc: dict = {}
    h40 = find("Hash", N=40)
    if h40:
        acc["1_hash_N40_maxmin_max_over_intervals"] = h40["summary"]["realized_maxmin_max"]
        acc["1_hash_N40_maxmin_mean"] = h40["summary"]["realized_maxmin_mean"]
    mixed_runs = [r for r in runs if r["planner"] == "Mixed"]
    acc["2_mixed_planned_over_cap_on_intervals_without_hot_key"] = sum(
        r["over_cap_without_hot_key"] for r in mixed_runs)
    acc["2_mixed_plans_total"] = sum(r["summary"]["plans"] for r in mixed_runs)
    acc["2_mixed_hot_key_infeasible_plans_reported"] = sum(
        r["summary"]["hot_key_infeasible_plans"] for r in mixed_runs)
    acc["3_mixed_table_overflow_plans"] = sum(r["summary"]["table_overflow_plans"] for r in mixed_runs)
    acc["3_mixed_iterations_max"] = max((r["summary"]["iterations_max"] for r in mixed_runs), default=0)
    for w in (1, 5):
        m, t = find("Mixed", w=w), find("MinTable", w=w)
        if m and t:
            acc[f"4_default_w{w}_mixed_migration_pct"] = m["summary"]["migration_pct_mean"]
            acc[f"4_default_w{w}_mintable_migration_pct"] = t["summary"]["migration_pct_mean"]
            acc[f"4_default_w{w}_mintable_over_mixed"] = (
                t["summary"]["migration_pct_mean"] / max(m["summary"]["migration_pct_mean"], 1e-12))
    for s in speed:
        acc[f"5_mixed_plan_s_K{s['K']:.0e}_N{s['N']}_theta{s['theta']}_max"] = s["plan_time_s_max"]
    acc["7_routing_lookups_per_s_zipf_stream"] = lookup["zipf_stream_lookups_per_s"]
    return acc


def plot(runs: list[dict], mode: str) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = [("realized_maxmean_mean", "max/mean (realized)"),
               ("planned_maxmean_mean", "max/mean (planned)"),
               ("realized_maxmin_mean", "max/min (realized)"), ("table_size_mean", "table size"),
               ("migration_pct_mean", "migration % of state"), ("plan_time_ms_mean", "plan time ms")]
    files = []
    zipf = [r for r in runs if r["workload"] == "zipf"]
    for axis, values in AXES.items():
        fig, axs = plt.subplots(1, len(metrics), figsize=(4 * len(metrics), 3.6))
        any_line = False
        for planner in PLANNER_NAMES:
            xs, ys = [], {m: [] for m, _ in metrics}
            for v in values:
                want = DEFAULT | {axis: v}
                hit = [r for r in zipf if r["planner"] == planner
                       and all(r["config"][k] == want[k] for k in DEFAULT)]
                if hit:
                    xs.append(v)
                    for m, _ in metrics:
                        ys[m].append(hit[0]["summary"][m])
            if len(xs) >= 2:
                any_line = True
                for ax, (m, label) in zip(axs, metrics, strict=True):
                    ax.plot(xs, ys[m], marker="o", label=planner)
                    ax.set_title(label, fontsize=9)
                    ax.set_xlabel(axis)
                    if axis == "K" or m in ("table_size_mean", "realized_maxmin_mean", "plan_time_ms_mean"):
                        ax.set_yscale("symlog" if m != "plan_time_ms_mean" else "log")
                    if axis == "K":
                        ax.set_xscale("log")
        if not any_line:
            plt.close(fig)
            continue
        axs[0].legend(fontsize=7)
        fig.suptitle(f"Planners vs {axis} (others at default; {mode})")
        fig.tight_layout()
        path = RESULTS / f"planner_{axis}.png"
        fig.savefig(path, dpi=90)
        plt.close(fig)
        files.append(str(path.relative_to(RESULTS.parent.parent)))
    return files


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small subset, under a minute")
    ap.add_argument("--full", action="store_true", help="Cartesian grid (hours)")
    ap.add_argument("--intervals", type=int, default=None)
    ap.add_argument("--planners", default=",".join(PLANNER_NAMES))
    args = ap.parse_args(argv)
    mode = "quick" if args.quick else "full" if args.full else "sweep"
    intervals = args.intervals or (20 if args.quick else 50)
    planners = [p for p in args.planners.split(",") if p]
    console = Console(width=max(Console().width, 150))
    RESULTS.mkdir(parents=True, exist_ok=True)
    cfgs = configs(mode)
    started = time.perf_counter()
    runs: list[dict] = []
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=False) as progress:
        task = progress.add_task("simulating", total=len(cfgs) * len(planners))
        for cfg in cfgs:
            wl = workload_for(cfg, intervals)
            sc = sim_config(cfg, intervals)
            for name in planners:
                progress.update(task, description=f"{name:8s} {cfg}")
                t0 = time.perf_counter()
                res = simulate(wl, make_planner(name, sc), sc)
                over = (res.triggered & (res.planned_imbalance > 1 + cfg["theta"] + 1e-9)
                        & ~res.hot_key_infeasible)
                runs.append({"planner": name, "workload": cfg["workload"], "config": cfg,
                             "sim_config": asdict(sc), "summary": res.summary(),
                             "over_cap_without_hot_key": int(over.sum()),
                             "wall_s": time.perf_counter() - t0})
                progress.advance(task)
                if not console.is_terminal:  # no live bar when piped: print status lines instead
                    done = len(runs)
                    print(f"[{done}/{len(cfgs) * len(planners)}] {name} {cfg} "
                          f"{runs[-1]['wall_s']:.1f}s", flush=True)
        progress.update(task, description="speed points (acceptance 5)")
        speed = speed_points(3 if args.quick else 10)
        progress.update(task, description="routing lookups/s (acceptance 7)")
        lookup = routing_lookup.run(repeat=1 if args.quick else 3)
    (RESULTS / "routing_lookup.json").write_text(json.dumps(lookup, indent=2) + "\n")
    acc = acceptance(runs, speed, lookup)
    files = plot(runs, mode)
    out = {"mode": mode, "intervals": intervals, "defaults": DEFAULT | {"f": F, "beta": BETA, "A_max": A_MAX},
           "runtime_s": time.perf_counter() - started, "acceptance": acc, "speed_points": speed,
           "routing_lookup": lookup, "plots": files, "runs": runs}
    (RESULTS / "planner.json").write_text(json.dumps(out, indent=2) + "\n")
    print_tables(console, runs, acc)
    console.print(f"wrote bench/results/planner.json, {len(files)} plots; {out['runtime_s']:.0f} s")
    return 0


def print_tables(console: Console, runs: list[dict], acc: dict) -> None:
    table = Table(title="planner summary (means over intervals)", show_lines=False)
    for col in ("config", "planner", "max/mean real", "max/mean plan", "max/min real", "|A|",
                "migr %", "plan ms", "plans", "infeas."):
        table.add_column(col, justify="right" if col not in ("config", "planner") else "left")
    for r in runs:
        c, s = r["config"], r["summary"]
        label = f"{c['workload'][:4]} N{c['N']} z{c['z']} t{c['theta']} K{c['K']:.0e} w{c['w']}"
        table.add_row(label, r["planner"], f"{s['realized_maxmean_mean']:.2f}",
                      f"{s['planned_maxmean_mean']:.3f}",
                      f"{s['realized_maxmin_mean']:.1f}", f"{s['table_size_mean']:.0f}",
                      f"{s['migration_pct_mean']:.2f}", f"{s['plan_time_ms_mean']:.1f}", str(s["plans"]),
                      str(s["infeasible_plans"]))
    console.print(table)
    at = Table(title="acceptance figures")
    at.add_column("point")
    at.add_column("value", justify="right")
    for k, v in acc.items():
        at.add_row(k, f"{v:,.3f}" if isinstance(v, float) else str(v))
    console.print(at)


if __name__ == "__main__":
    raise SystemExit(main())
