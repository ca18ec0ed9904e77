"""Immutable, typed client configuration that renders to librdkafka dictionaries.

Why: services, tests and benchmarks must talk to Kafka with the same settings (idempotence,
murmur2 partitioning, loopback addresses) and every knob must be visible in one place. A frozen
dataclass is hashable, printable and cannot drift after start-up; ``overrides`` carries any other
librdkafka property (dot.case) untouched, the way Quix Streams' ``ConnectionConfig`` does.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
# librdkafka defaults to CRC32 ("consistent_random"); Java clients and Spark's Kafka sink use
# murmur2. Every producer Ballast ships uses murmur2 so a key lands where a JVM client puts it.
KAFKA_JAVA_PARTITIONER = "murmur2_random"


def _frozen(mapping: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return MappingProxyType(dict(mapping or {}))


@dataclass(frozen=True)
class KafkaConfig:
    """Connection and client settings shared by every Ballast process."""

    bootstrap_servers: str = DEFAULT_BOOTSTRAP
    client_id: str = "ballast"
    # Producer side
    acks: str = "all"
    enable_idempotence: bool = True
    linger_ms: int = 5
    batch_size: int = 1_000_000
    compression_type: str = "lz4"
    partitioner: str = KAFKA_JAVA_PARTITIONER
    # Consumer side
    auto_offset_reset: str = "earliest"
    isolation_level: str = "read_committed"
    overrides: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "overrides", _frozen(self.overrides))
        if not self.bootstrap_servers:
            raise ValueError("bootstrap_servers must not be empty")

    @classmethod
    def from_env(cls, **kwargs: Any) -> KafkaConfig:
        """Read ``BALLAST_BOOTSTRAP_SERVERS`` (and explicit kwargs, which win)."""
        env_bootstrap = os.environ.get("BALLAST_BOOTSTRAP_SERVERS")
        if env_bootstrap and "bootstrap_servers" not in kwargs:
            kwargs["bootstrap_servers"] = env_bootstrap
        return cls(**kwargs)

    def with_overrides(self, **props: Any) -> KafkaConfig:
        """A copy with more librdkafka properties (keys may use ``_`` for ``.``)."""
        merged = dict(self.overrides)
        merged.update({k.replace("_", "."): v for k, v in props.items()})
        return replace(self, overrides=merged)

    def common(self) -> dict[str, Any]:
        return {"bootstrap.servers": self.bootstrap_servers, "client.id": self.client_id}

    def producer(self, **extra: Any) -> dict[str, Any]:
        conf = self.common() | {
            "acks": self.acks,
            "enable.idempotence": self.enable_idempotence,
            "linger.ms": self.linger_ms,
            "batch.size": self.batch_size,
            "compression.type": self.compression_type,
            "partitioner": self.partitioner,
        }
        return conf | dict(self.overrides) | extra

    def consumer(self, group_id: str, **extra: Any) -> dict[str, Any]:
        conf = self.common() | {
            "group.id": group_id,
            "auto.offset.reset": self.auto_offset_reset,
            "isolation.level": self.isolation_level,
            "enable.auto.commit": False,
            "enable.partition.eof": False,
        }
        return conf | dict(self.overrides) | extra

    def admin(self, **extra: Any) -> dict[str, Any]:
        return self.common() | dict(self.overrides) | extra
