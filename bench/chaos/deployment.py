"""The campaign's deployment: the whole pipeline as services, started as a user starts them.

Two routers, the controller with its rebalancing loop on, the Spark reduce and the shedder, each
its own ``ballast … run`` process under the stack's supervisor, with the reduce's idle-partition
timeout and the routers' future bound set as flags.
"""

from __future__ import annotations

from ballast.devstack.services import ServiceCommand
from ballast.harness.pipeline import Pipeline
from bench.chaos.params import Params
from bench.chaos.plan import ROUTER


def job_of(pipe: Pipeline) -> str:
    return f"{pipe.layout.prefix}-reduce"


def commands(pipe: Pipeline, p: Params) -> dict[str, ServiceCommand]:
    """Every service of the deployment by name (the names the plan's targets map to)."""
    prefix = pipe.layout.prefix
    out: dict[str, ServiceCommand] = {}
    for i in range(1, p.routers + 1):
        router = pipe.router(
            f"{prefix}-r{i}",
            name=ROUTER.format(i),
            stats_interval_s=1,
            heavy_hitters_top=1000,
            session_timeout_ms=p.router_session_timeout_ms,
            max_future_ms=p.router_max_future_ms,
            log_level="warning",
        )
        out[router.name] = router
    out["controller"] = pipe.controller(
        "chaos",
        name="controller",
        interval_s=p.controller_interval_s,
        theta=p.theta,
        pricing="records",
        status_every_s=1,
        consecutive=2,
        min_gap=1,
        forecast=False,
        step_timeout_s=60,
        plan_theta=round(p.theta / 3, 4),
        log_level="warning",
    )
    stream = (
        f"topic={pipe.layout.name('input')},target={p.target_s:g}s,priority=0,min-accuracy={p.min_accuracy:g}"
    )
    out["shedder"] = pipe.shedder(
        stream,
        name="shedder",
        reduce_jobs=job_of(pipe),
        cycle_s=p.cycle_s,
        stop_after_s=p.shedder_stop_after_s,
        log_level="warning",
    )
    reduce = pipe.reduce(
        job_of(pipe),
        f"aggregate:size={p.window}",
        local_cores=p.workers,
        watermark_delay=p.watermark_delay,
        correction_horizon=p.correction_horizon,
        idle_timeout=f"{p.idle_timeout_s:g} seconds",
        trigger=p.trigger,
        record_cost_us=p.record_cost_us,
        log_level="ERROR",
    )
    out[reduce.name] = reduce
    return out


def targets(pipe: Pipeline, p: Params) -> dict[str, str]:
    """A plan's target -> the service it names."""
    names = {ROUTER.format(i): ROUTER.format(i) for i in range(1, p.routers + 1)}
    return names | {
        "controller": "controller",
        "shedder": "shedder",
        "reduce": pipe.reduce_name(job_of(pipe)),
    }
