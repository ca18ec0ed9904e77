"""``make bench-router-secured``: the router on a secured broker against an open one, alternating.

What it answers: what SASL_SSL (SCRAM-SHA-512, TLS on every connection) and ACL checks cost the
router, as a user would run it on a secured cluster (docs/security.md). Two single-node stacks run
side by side, one open and one as ``ballast stack up --secure`` starts it; each gets the same
preloaded input. Round after round, and alternating which goes first, the router
(``bench/router/run.py``'s ``routed_run``: a ``ballast router run`` process, measured from outside)
runs on each, in both delivery modes. On the secured stack the router connects as its own
principal (``User:router``) with the deployment's ACLs plus the bench's own group, transactional
id and input topic; the measuring clients are the admin. The figure is secured ÷ plain records/s
per round and its median: a ratio measured in one run, not a target.

Writes bench/results/router_secured.json and router_secured.png.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from plots import MODES, two_mode_scatter  # beside this script (run as bench/router/NAME.py)

ROOT = Path(__file__).resolve().parents[2]


def log(msg: str) -> None:
    print(f"[bench-router-secured {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=500_000)
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3, help="runs per stack and mode, alternating")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "router_secured.json"))
    args = ap.parse_args(argv)

    sys.path.insert(0, str(ROOT))
    from ballast.deployment.acls import Principals
    from ballast.deployment.create import grant_deployment
    from ballast.devstack.security import service_configs, stack_admin
    from ballast.devstack.stack import start_stack, stop_stack
    from ballast.kafka.acls import AclRule, create_acls
    from ballast.kafka.admin import ensure_topics, make_admin
    from ballast.kafka.topics import TopicSpec
    from bench.router.run import preload, routed_run, router_layout

    work = Path(tempfile.mkdtemp(prefix="ballast-secured-"))
    stacks = {
        "plain": start_stack(work / "plain", brokers=1),
        "secured": start_stack(work / "secured", brokers=1, secure=True),
    }
    src = "sec.input"
    runs: list[dict] = []
    try:
        admins = {name: stack_admin(state, "bench-secured") for name, state in stacks.items()}
        routers = {"plain": None, "secured": service_configs(stacks["secured"], "bench-secured")["router"]}
        for name, kafka in admins.items():
            ensure_topics(make_admin(kafka), [TopicSpec("input", src, 4)])
            log(f"preloading {args.records:,} records into the {name} stack ({stacks[name].bootstrap})")
            preload(kafka, src, args.records, args.keys)
        # routed_run names its group router-<hex> and reads `src`: the router's grants for those
        bench_rules = [
            AclRule("User:router", "group", "router-", "prefixed", "read"),
            AclRule("User:router", "transactional_id", "router-", "prefixed", "write"),
            AclRule("User:router", "topic", src, "literal", "read"),
        ]
        create_acls(make_admin(admins["secured"]), bench_rules)
        for rnd in range(1, args.rounds + 1):
            for mode in ("alo", "eos"):
                for which in ("plain", "secured") if rnd % 2 else ("secured", "plain"):
                    kafka = admins[which]
                    admin = make_admin(kafka)
                    layout = router_layout(kafka, admin, f"sec-{uuid.uuid4().hex[:8]}")
                    if which == "secured":
                        grant_deployment(kafka, layout, Principals(), admin)
                    eos, router = mode == "eos", routers[which]
                    rate = routed_run(kafka, layout, args.records, eos, src, router_kafka=router)
                    runs.append({"round": rnd, "mode": mode, "stack": which, "records_per_s": rate})
                    log(f"round {rnd}/{args.rounds} {mode} {which}: router {rate:,.0f} rec/s")
    finally:
        for state in stacks.values():
            stop_stack(state.state_dir, purge=True)
    rate_of = {(r["round"], r["mode"], r["stack"]): r["records_per_s"] for r in runs}
    rounds = range(1, args.rounds + 1)
    ratios = {
        mode: [rate_of[(rnd, mode, "secured")] / rate_of[(rnd, mode, "plain")] for rnd in rounds]
        for mode in ("alo", "eos")
    }
    medians = {mode: round(statistics.median(r), 3) for mode, r in ratios.items()}
    report = {
        "records": args.records,
        "rounds": args.rounds,
        "note": "router records/s on a secured single-node stack (SASL_SSL SCRAM-SHA-512, ACLs, the "
        "router as User:router) divided by the same on an open one, per round; stacks alternate",
        "median_ratio_secured_over_plain": medians,
        "ratios": {m: [round(x, 3) for x in r] for m, r in ratios.items()},
        "runs": runs,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    plot(runs, medians, out.with_suffix(".png"))
    print()
    for mode, m in medians.items():
        print(f"{mode:<5} secured / plain router throughput: median {m:.3f} (rounds {ratios[mode]})")
    log(f"wrote {out}")
    return 0


def plot(runs: list[dict], medians: dict, path: Path) -> None:
    """Each run's router throughput, by mode and stack; the secured/plain median ratio under each."""
    points = {
        mode: {which: [r["records_per_s"] for r in runs if r["mode"] == mode and r["stack"] == which]
               for which in ("plain", "secured")}
        for mode, _name in MODES
    }  # fmt: skip
    notes = {mode: f"secured/plain {medians[mode]:.2f}" for mode, _name in MODES}
    two_mode_scatter(points, {"plain": "plain", "secured": "secured"}, path, ylabel="router records/s",
                     title="Router on a secured broker vs an open one", notes=notes)  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
