"""``ballast stack up --pipeline``: a deployment's topics and genesis, N routers and the reduce, as
services of the local stack.

Why the library knows the services only by their commands: the devstack starts ``ballast router
run`` and ``ballast reduce run|submit`` the way a user would type them, through
:mod:`ballast.devstack.services`, and never imports a service. Each service's own knobs come from
its environment variables (``BALLAST_ROUTER_*``, ``BALLAST_REDUCE_*``), which the services inherit
from the command that starts them; the layout (prefix, workers, partitions) is passed as flags so
every service agrees on topic names.

The reduce runs on the stack's Spark cluster when it has one (``--spark``, through ``reduce
submit``), else in a local Spark of its own (``local[--reduce-cores]``). Its checkpoint lives in
its service folder, so restarting the pipeline on the same folder resumes the job.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import ClassVar

from ballast.deployment.create import create_deployment
from ballast.devstack.processes import Progress, quiet
from ballast.devstack.security import service_env, stack_admin
from ballast.devstack.services import (
    ServiceCommand,
    is_running,
    service_dir,
    start_service,
    stop_service,
    wait_ready,
)
from ballast.devstack.spark_cluster import spark_running
from ballast.devstack.state import ServiceState, StackError, StackState
from ballast.kafka.topics import LayoutSettings
from ballast.settings import Settings, setting


@dataclass(frozen=True)
class PipelineSettings(Settings):
    """What ``ballast stack up --pipeline`` starts besides the servers."""

    ENV_PREFIX: ClassVar[str] = "BALLAST_STACK_"

    pipeline: bool = setting(
        False, "also create the topics (and genesis) and start Ballast's services: routers and the reduce"
    )
    routers: int = setting(2, "router services started with --pipeline", minimum=0)
    reduce: bool = setting(
        True, "start the Spark reduce with --pipeline (on the stack's Spark cluster with --spark, else local)"
    )
    reduce_cores: int = setting(
        2, "task slots of the reduce's local Spark when the stack has no cluster", minimum=1
    )
    reduce_executor_cores: int = setting(
        0,
        "cores the reduce takes from the stack's Spark cluster, with --spark (0: every core it offers)",
        minimum=0,
    )
    ready_timeout: float = setting(300.0, "seconds to wait for each service to be ready", minimum=1)


def router_name(i: int) -> str:
    return f"router-{i}"


REDUCE = "reduce"


def pipeline_commands(
    state: StackState, layout: LayoutSettings, settings: PipelineSettings
) -> list[ServiceCommand]:
    """The services of the pipeline, as the commands that start them."""
    layout_args = tuple(layout.to_argv())
    commands = [
        ServiceCommand(
            router_name(i),
            "router",
            ("router", "run", "--router-id", f"{layout.prefix}-{router_name(i)}", *layout_args),
            env=service_env(state, "router"),
        )
        for i in range(1, settings.routers + 1)
    ]
    if settings.reduce:
        folder = service_dir(state, REDUCE)
        job = (
            "--job-id",
            f"{layout.prefix}-reduce",
            "--checkpoint",
            str(folder / "checkpoint"),
            *layout_args,
        )
        if state.spark is not None and spark_running(state):
            args = (
                "reduce",
                "submit",
                "--master",
                state.spark.master_url,
                "--driver-log",
                str(folder / "driver.log"),
                "--total-executor-cores",
                str(settings.reduce_executor_cores),
            )
            commands.append(ServiceCommand(REDUCE, "reduce", (*args, *job), env=service_env(state, "reduce")))
        else:
            args = ("reduce", "run", "--local-cores", str(settings.reduce_cores))
            commands.append(ServiceCommand(REDUCE, "reduce", (*args, *job), env=service_env(state, "reduce")))
    return commands


def start_pipeline(
    state: StackState, layout: LayoutSettings, settings: PipelineSettings, progress: Progress = quiet
) -> list[ServiceState]:
    """Topics and genesis (idempotent), then every service not running yet, each waited for."""
    if not state.nodes:
        raise StackError("the pipeline needs brokers: start them first")
    kafka = stack_admin(state, "ballast-stack")
    created = create_deployment(kafka, layout.layout(), layout.active_workers)
    progress(
        f"topics of prefix {layout.prefix!r}: genesis {created.genesis_status} ({created.genesis.describe()})"
    )
    started = []
    for command in pipeline_commands(state, layout, settings):
        existing = state.service(command.name)
        if existing is not None and is_running(state, existing):
            progress(f"{command.kind} service {command.name} already running (pid {existing.pid})")
            started.append(existing)
            continue
        started.append(start_service(state, command, progress))
    for service in started:
        wait_ready(state, service.name, settings.ready_timeout, progress)
        progress(f"{service.kind} service {service.name} ready (pid {service.pid}, log {Path(service.log)})")
    return started


def router_index(name: str) -> int | None:
    """``router-3`` -> 3; None for a service that is no router of the pipeline."""
    head, _, tail = name.partition("-")
    return int(tail) if head == "router" and tail.isdigit() else None


def scale_routers(
    state: StackState,
    layout: LayoutSettings,
    count: int,
    settings: PipelineSettings,
    progress: Progress = quiet,
) -> tuple[list[str], list[str]]:
    """The pipeline's routers made ``count``: ``router-1`` … ``router-<count>`` running (started and
    waited for when not), every higher one stopped (SIGTERM: it commits or aborts its transaction,
    and the group gives its partitions to the others). The actuator of the controller's router
    decisions in the local stack (``--router-hook 'ballast stack scale-routers $BALLAST_SCALING_TO'``).
    Returns the routers started and stopped."""
    if count < 0:
        raise StackError(f"a router count cannot be negative: {count}")
    wanted = replace(settings, routers=count, reduce=False)
    started = []
    for command in pipeline_commands(state, layout, wanted):
        existing = state.service(command.name)
        if existing is not None and is_running(state, existing):
            continue
        start_service(state, command, progress)
        started.append(command.name)
    for name in started:
        wait_ready(state, name, settings.ready_timeout, progress)
        progress(f"router service {name} started")
    stopped = []
    for service in list(state.services):
        i = router_index(service.name)
        if i is not None and i > count and is_running(state, service):
            stop_service(state, service.name)
            stopped.append(service.name)
            progress(f"router service {service.name} stopped")
    return started, stopped


def scale_reduce(
    state: StackState,
    layout: LayoutSettings,
    cores: int,
    settings: PipelineSettings,
    progress: Progress = quiet,
) -> ServiceState:
    """The reduce restarted on ``cores``: its local Spark's task slots, or the cores it takes from
    the stack's cluster. The actuator of the controller's reduce decisions in the local stack
    (``--reduce-hook 'ballast stack scale-reduce $BALLAST_SCALING_TO'``): the log's ``SCALE``
    already moved the hashed workers, this gives them a core each.

    Why a restart: a local master's task slots are fixed when its SparkContext starts, and so are
    the cores a standalone application asks for; DS2 on Flink restarted from a savepoint the same
    way. (Requesting and killing executors through a running SparkContext is the other way on the
    cluster, not tried yet: docs/scaling.md.) The query stops on SIGTERM and resumes from its
    checkpoint: no record is lost or counted twice in a window, and a batch cut short is written
    again with the same rows (the reduce's output is at-least-once, docs/reduce.md)."""
    if cores < 1:
        raise StackError(f"the reduce needs at least one core, got {cores}")
    existing = state.service(REDUCE)
    if existing is None:
        raise StackError("the pipeline has no reduce to scale: start it with `ballast stack up --pipeline`")
    wanted = replace(settings, routers=0, reduce=True, reduce_cores=cores, reduce_executor_cores=cores)
    (command,) = [c for c in pipeline_commands(state, layout, wanted) if c.name == REDUCE]
    if is_running(state, existing):
        stop_service(state, REDUCE)
        progress(f"reduce service stopped (pid {existing.pid})")
    started = start_service(state, command, progress)
    wait_ready(state, REDUCE, settings.ready_timeout, progress)
    progress(f"reduce service started on {cores} cores (pid {started.pid})")
    return started
