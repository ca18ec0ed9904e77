"""A campaign's plan from its seed: which faults, on what, when, for how long; and the burst's place.

Pure (a seed and the parameters in, a plan out), so a seed names a campaign: a failing seed is run
again with ``--seeds 1 --first-seed N`` and gets the same faults at the same offsets into its input.

Why one of each fault per run, at seeded random times at least ``min_gap_s`` apart: the issue asks
for every kind in every run, and faults that start together make every recovery time the slowest
one's. They may still overlap (a broker down for 20 s while a router is killed): that is the
point of a campaign, and each fault's recovery is measured from its own end all the same.

Why the stall lengths are bounded as they are: a stopped router must outlast its group's session
(its partitions move) and stay under the reduce's idle-partition timeout (no record may turn late
for it); a stopped reduce must outlast the time the shedder takes to call it stopped. The plan
refuses parameters that break these (:func:`check`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from bench.chaos.params import Params

KINDS = (
    "kill-router",
    "kill-controller",
    "kill-reduce",
    "kill-shedder",
    "kill-broker",
    "stop-router",
    "stop-reduce",
    "skewed-producer",
    "junk-input",
    "junk-control",
)
ROUTER = "router-{}"  # service names, shared with the run
BROKERS = 3


@dataclass(frozen=True)
class FaultSpec:
    kind: str
    target: str  # a service name, "broker-N", or the topic role written to
    at_s: float  # seconds into the input
    hold_s: float  # down, stopped or skewed this long (0: a one-off write)

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True)
class Plan:
    seed: int
    burst_at_s: float
    faults: tuple[FaultSpec, ...]

    def as_dict(self) -> dict[str, object]:
        faults = [f.as_dict() for f in self.faults]
        return {"seed": self.seed, "burst_at_s": self.burst_at_s, "faults": faults}


def kinds(p: Params) -> tuple[str, ...]:
    """The fault kinds of the plan: all of them but those ``skip`` names."""
    skipped = {k.strip() for k in p.skip.split(",") if k.strip()}
    if skipped - set(KINDS):
        unknown = sorted(skipped - set(KINDS))
        raise ValueError(f"skip names no fault kind: {unknown} (kinds: {', '.join(KINDS)})")
    return tuple(k for k in KINDS if k not in skipped)


def check(p: Params) -> None:
    """Refuse parameters whose stalls would not test what the campaign claims to test."""
    session_s = p.router_session_timeout_ms / 1000
    if not session_s < p.router_stop_s * 0.9 < p.router_stop_s * 1.1 < p.idle_timeout_s - 5:
        raise ValueError(
            f"router_stop_s {p.router_stop_s:g} must stay above the router session ({session_s:g} s) and "
            f"below the idle timeout ({p.idle_timeout_s:g} s) by a margin"
        )
    if not p.reduce_stop_s * 0.9 > p.shedder_stop_after_s:
        raise ValueError("reduce_stop_s must exceed shedder_stop_after_s (the reduce's timeout as watched)")
    if p.kill_down_s >= p.idle_timeout_s / 3:
        raise ValueError("kill_down_s must leave a restarted router time to start within the idle timeout")
    span = p.input_s - p.first_fault_s - p.quiet_tail_s
    if span < (len(kinds(p)) - 1) * p.min_gap_s:
        raise ValueError(f"{len(kinds(p))} faults {p.min_gap_s:g} s apart do not fit in {span:g} s of input")


def make_plan(seed: int, p: Params) -> Plan:
    """The faults of campaign ``seed``, in the order they start."""
    check(p)
    rng = np.random.default_rng(seed)
    planned = kinds(p)
    n = len(planned)
    span = p.input_s - p.first_fault_s - p.quiet_tail_s
    slack = span - (n - 1) * p.min_gap_s
    offsets = np.sort(rng.uniform(0.0, slack, n)) + np.arange(n) * p.min_gap_s + p.first_fault_s
    order = [planned[i] for i in rng.permutation(n)]
    killed_router, stopped_router = (int(x) + 1 for x in rng.choice(p.routers, 2, replace=p.routers < 2))
    faults = []
    for kind, at in zip(order, offsets.tolist(), strict=True):
        jitter = float(rng.uniform(0.9, 1.1))
        target, hold = {
            "kill-router": (ROUTER.format(killed_router), p.kill_down_s * jitter),
            "kill-controller": ("controller", p.kill_down_s * jitter),
            "kill-reduce": ("reduce", p.kill_down_s * jitter),
            "kill-shedder": ("shedder", p.kill_down_s * jitter),
            "kill-broker": (f"broker-{int(rng.integers(1, BROKERS + 1))}", p.broker_down_s * jitter),
            "stop-router": (ROUTER.format(stopped_router), p.router_stop_s * jitter),
            "stop-reduce": ("reduce", p.reduce_stop_s * jitter),
            "skewed-producer": ("input", p.skew_s),
            "junk-input": ("input", 0.0),
            "junk-control": ("control", 0.0),
        }[kind]
        faults.append(FaultSpec(kind, target, round(at, 2), round(hold, 2)))
    burst_at = float(rng.uniform(0.3, 0.6)) * p.input_s
    return Plan(seed, round(burst_at, 2), tuple(faults))
