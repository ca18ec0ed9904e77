"""RouterConfig: every router knob, with its flag and environment variable generated from one table.

Why one table: the flag, the env variable (``BALLAST_ROUTER_<NAME>``), the default and the help
text of a knob cannot drift apart, and docs/router.md lists the same table.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field, fields
from typing import Any

from services.router.input_formats import FORMATS, FormatOptions


@dataclass(frozen=True)
class RouterConfig:
    """Frozen settings of one router instance (the Kafka connection lives in KafkaConfig)."""

    router_id: str = field(
        default="router-0",
        metadata={"help": "stable instance id (transactional.id, group.instance.id, marker router_id)"},
    )
    prefix: str = field(default="ballast", metadata={"help": "topic prefix for the default topic names"})
    input_topics: tuple[str, ...] = field(
        default=(), metadata={"help": "comma-separated input topics (default <prefix>.input)"}
    )
    routed_topic: str = field(default="", metadata={"help": "default <prefix>.routed"})
    control_topic: str = field(default="", metadata={"help": "default <prefix>.control"})
    metrics_topic: str = field(default="", metadata={"help": "default <prefix>.metrics"})
    dead_letter_topic: str = field(default="", metadata={"help": "default <prefix>.dead-letter"})
    group_id: str = field(
        default="ballast-router", metadata={"help": "consumer group of the router instances"}
    )
    workers: int = field(default=0, metadata={"help": "active workers at epoch 0 (0 = routed partitions)"})
    exactly_once: bool = field(default=True, metadata={"help": "Kafka transactions (off: --at-least-once)"})
    batch_size: int = field(default=10_000, metadata={"help": "max records per consume() call"})
    poll_timeout_ms: int = field(default=100, metadata={"help": "consume() wait when the input is idle"})
    commit_interval_ms: int = field(default=500, metadata={"help": "transaction / offset-commit interval"})
    stats_interval_s: float = field(default=10.0, metadata={"help": "key statistics publish interval"})
    heavy_hitter_capacity: int = field(
        default=10_000, metadata={"help": "sketch counters m (error <= N/(m+1))"}
    )
    heavy_hitters_top: int = field(default=100, metadata={"help": "heavy hitters published per interval"})
    input_format: str = field(default="auto", metadata={"help": f"one of {', '.join(FORMATS)}"})
    key_field: str = field(default="key", metadata={"help": "JSON field holding the routing key"})
    value_field: str = field(default="value", metadata={"help": "JSON field holding the numeric value"})
    time_field: str = field(default="event_time", metadata={"help": "JSON field holding event time (ms)"})
    string_key: str = field(
        default="kafka", metadata={"help": "plain strings: key from 'kafka' key or 'value'"}
    )
    max_record_bytes: int = field(default=1_000_000, metadata={"help": "larger values are dead-lettered"})
    route_cache_size: int = field(default=1_000_000, metadata={"help": "keys whose route/hash is cached"})
    metrics_port: int = field(default=0, metadata={"help": "Prometheus port (0 = disabled)"})
    transactional_id_prefix: str = field(
        default="ballast-router", metadata={"help": "transactional.id = <prefix>.<group>.<id>"}
    )
    static_membership: bool = field(default=True, metadata={"help": "group.instance.id = router id"})
    session_timeout_ms: int = field(default=15_000, metadata={"help": "consumer group session timeout"})
    shed_seed: int = field(default=0, metadata={"help": "seed of the shedding sampler (0 = random)"})

    def __post_init__(self) -> None:
        p = self.prefix
        defaults = {
            "routed_topic": f"{p}.routed",
            "control_topic": f"{p}.control",
            "metrics_topic": f"{p}.metrics",
            "dead_letter_topic": f"{p}.dead-letter",
        }
        for name, value in defaults.items():
            if not getattr(self, name):
                object.__setattr__(self, name, value)
        if not self.input_topics:
            object.__setattr__(self, "input_topics", (f"{p}.input",))
        elif isinstance(self.input_topics, str):
            object.__setattr__(self, "input_topics", tuple(t for t in self.input_topics.split(",") if t))
        if not self.router_id or any(c in self.router_id for c in " /"):
            raise ValueError(f"router_id must be a non-empty token, got {self.router_id!r}")
        FormatOptions(self.input_format, string_key=self.string_key)  # validates
        for name in ("batch_size", "commit_interval_ms", "heavy_hitter_capacity", "route_cache_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")

    @property
    def transactional_id(self) -> str:
        return f"{self.transactional_id_prefix}.{self.group_id}.{self.router_id}"

    def format_options(self) -> FormatOptions:
        return FormatOptions(
            self.input_format,
            self.key_field,
            self.value_field,
            self.time_field,
            self.string_key,
            self.max_record_bytes,
        )

    # --- flags and environment -------------------------------------------------------------------

    @staticmethod
    def env_name(name: str) -> str:
        return f"BALLAST_ROUTER_{name.upper()}"

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        """One flag per field; defaults come from ``BALLAST_ROUTER_<NAME>`` when set."""
        for f in fields(cls):
            flag = "--" + f.name.replace("_", "-")
            env = cls.env_name(f.name)
            help_text = f"{f.metadata.get('help', '')} (env {env})"
            if f.name == "exactly_once":
                parser.add_argument(
                    "--at-least-once",
                    dest="exactly_once",
                    action="store_false",
                    default=None,
                    help=f"trade exactly-once for speed: commit offsets after flushing (env {env}=false)",
                )
                parser.add_argument(
                    "--exactly-once",
                    dest="exactly_once",
                    action="store_true",
                    default=None,
                    help=argparse.SUPPRESS,
                )
                continue
            if f.type in ("bool", bool):
                parser.add_argument(
                    flag, dest=f.name, default=None, type=_bool, metavar="true|false", help=help_text
                )
                continue
            parser.add_argument(flag, dest=f.name, default=None, help=help_text)

    @classmethod
    def from_args(
        cls, args: argparse.Namespace | None = None, env: dict[str, str] | None = None
    ) -> RouterConfig:
        """Flag, else environment, else default; values are converted by the field's type."""
        env = dict(os.environ if env is None else env)
        kwargs: dict[str, Any] = {}
        for f in fields(cls):
            raw = getattr(args, f.name, None) if args is not None else None
            if raw is None:
                raw = env.get(cls.env_name(f.name))
            if raw is None:
                continue
            kwargs[f.name] = _convert(f.type, raw)
        return cls(**kwargs)


def _bool(raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    value = str(raw).strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true/false, got {raw!r}")


def _convert(type_name: Any, raw: Any) -> Any:
    t = type_name if isinstance(type_name, str) else getattr(type_name, "__name__", str(type_name))
    if t == "bool":
        return _bool(raw)
    if t == "int":
        return int(raw)
    if t == "float":
        return float(raw)
    if t.startswith("tuple"):
        return tuple(x for x in str(raw).split(",") if x) if isinstance(raw, str) else tuple(raw)
    return str(raw)
