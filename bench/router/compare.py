"""``make bench-router-compare BASE=<commit>``: the router of two commits on one broker, alternating.

Why: the machine is shared and noisy, so a ratio measured today cannot be compared with one
measured on another day. This starts one broker, preloads one input, and then, round after round,
runs the bare consume→produce loop and the router of BASE and of the working tree (HEAD) in turn,
each driven by a fresh process whose imports resolve to its own checkout (a temporary ``git
worktree`` of BASE). Every run reports router/bare measured back to back on the same broker and
input; the medians per mode and commit are what to compare. The bare loop and the router run are
each checkout's own ``bench/router/run.py`` functions (``bare``, ``routed_run``, ``router_layout``),
so a commit's benchmark measures that commit's router the way that commit measures it (a ``ballast
router run`` process of that checkout since the benchmarks start services only through the CLI,
in the driver's process before). The driver copes with both sides of the rename of
``ballast.kafka.config`` to ``ballast.kafka.configuration``.

Writes bench/results/router_compare.json (every run and the medians) and router_compare.png.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from plots import MODES, two_mode_scatter  # beside this script (run as bench/router/NAME.py)

ROOT = Path(__file__).resolve().parents[2]

DRIVER = r"""
import importlib.util, inspect, json, sys, uuid
tree, bootstrap, src, n, eos = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5] == "eos"
sys.path.insert(0, tree)
spec = importlib.util.spec_from_file_location("bench_router_run", f"{tree}/bench/router/run.py")
run = importlib.util.module_from_spec(spec)
spec.loader.exec_module(run)
import ballast
# the tree's own code; its benchmark starts its router (`ballast router run`, or in-process in
# trees before the router ran as a process) from this checkout too (PYTHONPATH = its root)
assert ballast.__file__.startswith(tree), ballast.__file__
from ballast.kafka.admin import ensure_topics, make_admin
from ballast.kafka.topics import TopicSpec
try:  # the connection config since 49e3d28
    from ballast.kafka.configuration import KafkaConfig
    kafka = KafkaConfig.plaintext(bootstrap, "bench-compare")
except ImportError:  # before it
    from ballast.kafka.config import KafkaConfig
    kafka = KafkaConfig(bootstrap_servers=bootstrap, client_id="bench-compare")
admin = make_admin(kafka)
tag = uuid.uuid4().hex[:8]
bare_out = f"cmp-bare-{tag}"
ensure_topics(admin, [TopicSpec("x", bare_out, 8, run.APPEND_TIME)])
b = run.bare(kafka, src, bare_out, n, eos)
# each checkout's own deployment step (newer ones also write the control log's genesis)
params = inspect.signature(run.router_layout).parameters
args = (kafka, admin) if "kafka" in params else (admin,)
layout = run.router_layout(*args, f"cmp-{tag}")
rt = run.routed_run(kafka, layout, n, eos, src)
print(json.dumps({"bare": b, "router": rt}))
"""


def log(msg: str) -> None:
    print(f"[bench-router-compare {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def one_run(tree: Path, bootstrap: str, src: str, n: int, mode: str) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-c", DRIVER, str(tree), bootstrap, src, str(n), mode],
        cwd=tree,
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"run in {tree} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, help="the commit to compare the working tree with")
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3, help="runs per commit and mode, alternating")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "router_compare.json"))
    args = ap.parse_args(argv)

    sys.path.insert(0, str(ROOT))
    from ballast.devstack.stack import start_stack, stop_stack
    from ballast.kafka.admin import ensure_topics, make_admin
    from ballast.kafka.configuration import KafkaConfig
    from ballast.kafka.topics import TopicSpec
    from bench.router.run import preload

    base_rev = subprocess.run(
        ["git", "rev-parse", "--short", args.base], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    head_rev = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    work = Path(tempfile.mkdtemp(prefix="ballast-compare-"))
    base_tree = work / "base"
    subprocess.run(["git", "worktree", "add", "--detach", str(base_tree), args.base], cwd=ROOT, check=True)
    (base_tree / ".cache").symlink_to(ROOT / ".cache")
    state_dir = work / "stack"
    log(f"base {base_rev} in {base_tree}; head {head_rev} (working tree); broker in {state_dir}")
    stack = start_stack(state_dir, brokers=1)
    runs: list[dict] = []
    try:
        kafka = KafkaConfig.plaintext(stack.bootstrap, "bench-compare")
        src = "cmp.input"
        ensure_topics(make_admin(kafka), [TopicSpec("input", src, 4)])
        log(f"preloading {args.records:,} records")
        preload(kafka, src, args.records, args.keys)
        trees = {"base": base_tree, "head": ROOT}
        for rnd in range(1, args.rounds + 1):
            for mode in ("alo", "eos"):
                for which in ("base", "head") if rnd % 2 else ("head", "base"):
                    r = one_run(trees[which], stack.bootstrap, src, args.records, mode)
                    ratio = r["router"] / r["bare"]
                    runs.append({"round": rnd, "mode": mode, "commit": which, **r, "ratio": ratio})
                    log(
                        f"round {rnd}/{args.rounds} {mode} {which}: bare {r['bare']:,.0f} rec/s, "
                        f"router {r['router']:,.0f} rec/s, ratio {ratio:.3f}"
                    )
    finally:
        stop_stack(state_dir, purge=True)
        subprocess.run(["git", "worktree", "remove", "--force", str(base_tree)], cwd=ROOT, check=False)
    medians = {
        mode: {
            which: round(
                statistics.median(x["ratio"] for x in runs if x["mode"] == mode and x["commit"] == which), 3
            )
            for which in ("base", "head")
        }
        for mode in ("alo", "eos")
    }
    report = {
        "base": base_rev,
        "head": head_rev,
        "records": args.records,
        "rounds": args.rounds,
        "note": "router/bare per run, both measured back to back on one broker and input; "
        "commits alternate within each round",
        "median_ratio": medians,
        "runs": runs,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    plot(runs, medians, base_rev, head_rev, out.with_suffix(".png"))
    print()
    print(f"{'mode':<6}{'base ' + base_rev:>16}{'head ' + head_rev:>16}   (median router/bare)")
    for mode, m in medians.items():
        print(f"{mode:<6}{m['base']:>16.3f}{m['head']:>16.3f}")
    log(f"wrote {out}")
    return 0


def plot(runs: list[dict], medians: dict, base: str, head: str, path: Path) -> None:
    """Each run's router/bare ratio, by mode and commit (the mark: the median of the runs)."""
    points = {
        mode: {which: [r["ratio"] for r in runs if r["mode"] == mode and r["commit"] == which]
               for which in ("base", "head")}
        for mode, _name in MODES
    }  # fmt: skip
    two_mode_scatter(points, {"base": base, "head": head}, path, ylabel="router / bare (records/s)",
                     title="Router vs bare loop, two commits, one broker")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
