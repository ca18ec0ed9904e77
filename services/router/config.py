"""RouterSettings: every knob of one router instance, declared once with ballast.settings.

Why no topic names here: they come only from the deployment's
:class:`~ballast.kafka.topics.TopicLayout` (``--prefix``, the layout settings), so a router cannot
write to a routed topic the workers do not read, or follow a control log the controller does not
write. Likewise the workers active at epoch 0 are the layout's ``active_workers``. The one
exception is ``input_topics``: a router may read extra sources (e.g. a Connect topic), and the
benchmark feeds it from topics of its own.
"""

from __future__ import annotations

import os
import re
import secrets
import socket
from dataclasses import dataclass, replace

from ballast.kafka.identities import router_group, router_transactional_id
from ballast.settings import Settings, setting
from services.router.input_formats import FORMATS, FormatOptions

LOG_LEVELS = ("debug", "info", "warning", "error")


def _host_token() -> str:
    """The host name as an id token (no spaces or slashes)."""
    return re.sub(r"[^A-Za-z0-9_.-]", "-", socket.gethostname()) or "host"


@dataclass(frozen=True)
class RouterSettings(Settings):
    """Frozen settings of one router instance (the Kafka connection and topic layout are separate groups)."""

    ENV_PREFIX = "BALLAST_ROUTER_"

    router_id: str = setting(
        "",
        "instance id: transactional.id, group.instance.id, markers' router_id (empty: "
        "router-<host>-<pid>-<4 hex>, unique per instance; give a stable one so a restart reclaims its "
        "partitions and fences its zombie)",
    )
    input_topics: tuple[str, ...] = setting(
        (), "comma-separated input topics (none: the layout's <prefix>.input)"
    )
    group_id: str = setting(
        "", "consumer group of the router instances (empty: <prefix>.routers, the layout's prefix)"
    )
    exactly_once: bool = setting(
        True,
        "Kafka transactions; --at-least-once trades them for speed (flush, then commit offsets)",
        off_flag="--at-least-once",
    )
    batch_size: int = setting(10_000, "max records per consume() call")
    poll_timeout_ms: int = setting(100, "consume() wait when the input is idle")
    control_poll_ms: int = setting(
        10,
        "while no input comes, consume() waits in slices of this long and the control log is read "
        "between them: a new epoch is noticed within about this long on an idle or slow input",
        minimum=1,
    )
    commit_interval_ms: int = setting(500, "transaction / offset-commit interval")
    epoch_settle_ms: int = setting(
        150,
        "after an epoch change, transactions last at most --epoch-settle-commit-ms for this long, so "
        "the markers of routers that notice the epoch later are not held behind this router's open "
        "transaction for a whole commit interval (docs/router.md, control latency); 0: off",
    )
    epoch_settle_commit_ms: int = setting(
        20, "the longest transaction during --epoch-settle-ms after an epoch change", minimum=1
    )
    commit_when_idle: bool = setting(
        False,
        "also commit as soon as a poll finds no input: under light load records wait for no timer "
        "(a transaction per burst; more commits when input trickles)",
    )
    max_future_ms: int = setting(
        10_000,
        "a record whose event time is further ahead of this router's clock is dead-lettered "
        "(reason future): one producer's bad clock must not move the reduce's event time "
        "(docs/router.md, 'Event time'); 0: no bound",
        minimum=0,
    )
    progress_interval_ms: int = setting(
        1_000,
        "at most this often (at a commit), a marker set tells every routed partition how far each "
        "owned input partition has come in event time; records shed are reported at every commit "
        "(0: at every commit)",
        minimum=0,
    )
    stats_interval_s: float = setting(10.0, "key statistics publish interval (seconds)")
    heavy_hitter_capacity: int = setting(10_000, "sketch counters m (error <= N/(m+1))")
    heavy_hitters_top: int = setting(
        2000,
        "heavy hitters published per interval: the keys the planner can place (the routing table's "
        "reach); a RouterKeyStats record at 2,000 keys of 11 bytes is 29 KB (docs/router.md)",
    )
    input_format: str = setting("auto", "input record format", choices=FORMATS)
    key_field: str = setting("key", "JSON field holding the routing key")
    value_field: str = setting("value", "JSON field holding the numeric value")
    time_field: str = setting("event_time", "JSON field holding the event time (ms)")
    string_key: str = setting(
        "kafka", "plain strings: key from the Kafka key or the text itself", choices=("kafka", "value")
    )
    max_record_bytes: int = setting(
        0,
        "largest record the router writes (envelope + key); a larger one is dead-lettered (oversize). "
        "0: the producer's message.max.bytes minus 512; a larger value is lowered to that, with a warning",
        minimum=0,
    )
    route_cache_size: int = setting(1_000_000, "keys whose route is cached per epoch")
    metrics_port: int = setting(0, "Prometheus /metrics port (0: disabled)")
    metrics_host: str = setting(
        "127.0.0.1", "address the Prometheus endpoint binds (loopback by default; 0.0.0.0 in a container)"
    )
    transactional_id_prefix: str = setting(
        "",
        "transactional.id = <group>.<router id>, or <this>.<group>.<router id> when given (the group "
        "carries the layout's prefix: namesakes of two deployments never fence each other)",
    )
    static_membership: bool = setting(True, "group.instance.id = router id (fast restart)")
    session_timeout_ms: int = setting(15_000, "consumer group session timeout")
    metadata_refresh_ms: int = setting(
        30_000,
        "how often the router asks the cluster for its input topics' partitions: a partition added to "
        "an input topic is routed within about this long (librdkafka's default is 5 minutes)",
        minimum=1_000,
    )
    max_poll_interval_ms: int = setting(
        300_000, "longest pause between polls before the group takes the partitions away (lost)"
    )
    commit_timeout_ms: int = setting(
        60_000, "per call: send_offsets_to_transaction / commit_transaction / abort_transaction"
    )
    commit_attempts: int = setting(
        5, "calls per commit step on retriable errors (the failed call is resumed, not restarted)"
    )
    control_timeout_s: float = setting(
        30.0,
        "longest wait reading the control log: without progress at start, in total to reach an "
        "epoch an earlier owner of a partition committed",
    )
    log_level: str = setting("info", "log level of the router process", choices=LOG_LEVELS)

    def __post_init__(self) -> None:
        if isinstance(self.input_topics, str):
            topics = tuple(t.strip() for t in self.input_topics.split(",") if t.strip())
            object.__setattr__(self, "input_topics", topics)
        if not self.router_id:
            # unique per instance: two routers started with defaults must not share the
            # transactional.id / group.instance.id and fence each other
            unique = f"router-{_host_token()}-{os.getpid()}-{secrets.token_hex(2)}"
            object.__setattr__(self, "router_id", unique)
        if any(c in self.router_id for c in " /"):
            raise ValueError(f"router_id must be a non-empty token, got {self.router_id!r}")
        self.format_options()  # validates input_format and string_key
        for name in (
            "batch_size",
            "control_poll_ms",
            "commit_interval_ms",
            "heavy_hitter_capacity",
            "route_cache_size",
            "commit_timeout_ms",
            "commit_attempts",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not 1 <= self.heavy_hitters_top <= self.heavy_hitter_capacity:
            raise ValueError(
                f"heavy_hitters_top must be in 1..heavy_hitter_capacity ({self.heavy_hitter_capacity}), "
                f"got {self.heavy_hitters_top}"
            )
        if self.epoch_settle_ms < 0:
            raise ValueError(f"epoch_settle_ms must be >= 0, got {self.epoch_settle_ms}")
        if self.max_record_bytes < 0:
            raise ValueError(f"max_record_bytes must be >= 0, got {self.max_record_bytes}")

    def resolved(self, prefix: str) -> RouterSettings:
        """These settings with the defaults that depend on the deployment filled in: the group
        ``<prefix>.routers`` (:mod:`ballast.kafka.identities`). Every path that starts a router
        (the CLI, the stack, the test harness, benchmarks) goes through here, so all name their
        group and ``transactional.id`` alike; an explicit group is kept."""
        return self if self.group_id else replace(self, group_id=router_group(prefix))

    @property
    def transactional_id(self) -> str:
        """Stable across restarts of the same instance: ``init_transactions`` fences its zombie."""
        if not self.group_id:
            raise ValueError("the router's group is not resolved yet: RouterSettings.resolved(prefix)")
        return router_transactional_id(self.group_id, self.router_id, self.transactional_id_prefix)

    def format_options(self) -> FormatOptions:
        return FormatOptions(
            self.input_format,
            self.key_field,
            self.value_field,
            self.time_field,
            self.string_key,
            self.max_record_bytes,
        )
