"""Everything ``ballast controller run`` can be told: one frozen settings object, a flag and a
``BALLAST_CONTROLLER_*`` variable per field (``ballast controller run -h``).

Why these defaults: the loop must not flap at a load that sits at the threshold (trigger θ 0.15
above the planner's 0.08, two intervals in a row, at least three intervals between rebalances:
docs/controller.md), a migration step waits for the workers' installs but never forever (60 s,
then the migration is aborted and says so), and a request is answered within milliseconds (the
requests topic is polled every 20 ms when idle).
"""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass
from typing import ClassVar

from ballast.settings import Settings, setting
from services.controller.pacing import Mode, OnTimeout


@dataclass(frozen=True)
class ControllerSettings(Settings):
    ENV_PREFIX: ClassVar[str] = "BALLAST_CONTROLLER_"

    controller_id: str = setting(
        "", "this instance's name in responses and events (none: controller-<host>-<pid>)"
    )
    poll_ms: int = setting(20, "longest wait for requests when none are queued", minimum=1)
    request_ttl_s: float = setting(
        60.0,
        "a request that waited in the requests topic longer than this (measured on the broker's clock: its "
        "append time against a clock probe's) is refused as expired (its sender gave up waiting); 0: never",
        minimum=0,
    )
    snapshot_every: int = setting(
        1000, "a TABLE_SNAPSHOT every this many epochs (bounded reader start-up)", minimum=1
    )
    remembered_requests: int = setting(
        100_000, "request ids of the latest events kept to answer resends from the log", minimum=1
    )
    max_request_keys: int = setting(100_000, "keys one routing update request may name", minimum=1)
    max_request_bytes: int = setting(4 * 1024 * 1024, "largest request accepted (encoded bytes)", minimum=1)
    # the rebalancing loop
    rebalance: bool = setting(True, "run the rebalancing loop (off: only requests are ordered)")
    interval_s: float = setting(
        10.0, "length of one load interval (statistics folded, trigger checked)", minimum=0.1
    )
    router_report_grace: int = setting(
        2, "intervals a router's latest report stands in for one still on its way (0: never)", minimum=0
    )
    theta: float = setting(
        0.15, "trigger: rebalance when worker load max/mean stays above 1 + theta", minimum=0
    )
    plan_theta: float = setting(0.08, "planner: the plan aims at max/mean <= 1 + plan_theta", minimum=0)
    consecutive: int = setting(2, "trigger: intervals in a row above the threshold", minimum=1)
    min_gap: int = setting(3, "trigger: intervals between two rebalances at least", minimum=0)
    forecast: bool = setting(True, "plan for the next interval's forecast load (off: the last interval's)")
    forecast_calibration: bool = setting(
        True, "forecast: follow fresh changes measured to revert (off: always the rule's extrapolation)"
    )
    pricing: str = setting(
        "measured",
        "load of a worker's records: measured (its busy ms per record, DS2's rate) or records (every "
        "record the same: for jobs whose step time is per-step work, not per-record work)",
        choices=("measured", "records"),  # interval_load.PRICINGS (not imported: numpy at parse)
    )
    # paced migration
    pacing: str = setting(Mode.BATCHED.value, "how a plan goes out", choices=tuple(m.value for m in Mode))
    step_keys: int = setting(16, "batched pacing: keys per step at most (B)", minimum=1)
    step_bytes: int = setting(64 * 1024 * 1024, "batched pacing: state bytes per step at most (S)", minimum=1)
    step_timeout_s: float = setting(
        60.0, "a step not installed within this long is reported timed out", minimum=0.1
    )
    on_timeout: str = setting(
        OnTimeout.ABORT.value,
        "after a step timed out: abort the migration or go on",
        choices=tuple(o.value for o in OnTimeout),
    )
    wait_installs: bool = setting(
        True, "wait for the reduce workers' installs between steps (off: a deployment without a reduce job)"
    )
    # scaling (docs/scaling.md)
    scaling: str = setting(
        "off",
        "DS2 scaling: off, dry-run (decide and log SCALING events marked DRY_RUN, act on none) or on",
        choices=("off", "dry-run", "on"),
    )
    scaling_policy: str = setting(
        "ds2",
        "scaling: ds2 (true rates from useful time and the reduce's batch model) or busy-time (Flink's "
        "autoscaler's rule, for comparison: the busiest instance's busy fraction, utilization 0.7)",
        choices=("ds2", "busy-time"),
    )
    scaling_interval_s: float = setting(30.0, "scaling: one evaluation this often", minimum=1)
    scaling_catch_up_s: float = setting(
        120.0, "scaling: a backlog is to be worked off within this long (its catch-up rate)", minimum=1
    )
    scaling_warmup: int = setting(2, "scaling: evaluations ignored after an action", minimum=0)
    scaling_activation: int = setting(
        3, "scaling: consecutive estimates above the count before a scale-up", minimum=1
    )
    scale_down_delay_s: float = setting(
        600.0, "scaling: every estimate this long must ask for a real drop before a scale-down", minimum=0
    )
    reduce_trigger_s: float = setting(
        2.0, "scaling: the reduce's trigger interval (its --trigger): a batch must end within it", minimum=0.1
    )
    reduce_cores: int = setting(
        0, "scaling: cores that run the reduce's tasks when fixed (they cap its workers); 0: one per worker",
        minimum=0,
    )
    routers: int = setting(1, "scaling: router processes running when the controller starts", minimum=1)
    router_hook: str = setting(
        "",
        "scaling: a command run with a router decision (env BALLAST_SCALING_STAGE, _FROM, _TO, _EPOCH); "
        "empty: routers are estimated, not decided",
    )
    router_hook_timeout_s: float = setting(60.0, "scaling: the router hook's time limit", minimum=1)
    reduce_hook: str = setting(
        "",
        "scaling: a command run after an applied reduce decision and its SCALE are committed, to give the "
        "workers their compute (cores, executors; env as the router hook's); empty: the cores stay",
    )
    reduce_hook_timeout_s: float = setting(
        300.0, "scaling: the reduce hook's time limit (a restart of the query from its checkpoint)", minimum=1
    )
    # leadership and monitoring
    standby: bool = setting(
        False, "when fenced (or started while another runs), wait to take over instead of exiting"
    )
    takeover_after_s: float = setting(
        10.0, "standby: take over once the active controller published no status for this long", minimum=1
    )
    status_every_s: float = setting(
        2.0, "status record on the metrics topic and a log line this often", minimum=0.1
    )
    metrics_port: int = setting(0, "Prometheus /metrics port on 127.0.0.1 (0: off)", minimum=0)
    metrics_host: str = setting("127.0.0.1", "address the Prometheus endpoint binds (loopback by default)")
    log_level: str = setting("info", "log level", choices=("debug", "info", "warning", "error"))

    def resolved_id(self) -> str:
        return self.controller_id or f"controller-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:4]}"
