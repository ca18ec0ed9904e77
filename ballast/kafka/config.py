"""Immutable, typed client configuration that renders to librdkafka dictionaries.

Why: services, tests and benchmarks must talk to Kafka with the same settings (idempotence,
murmur2 partitioning, loopback addresses) and every knob must be visible in one place. A frozen
dataclass is hashable, printable and cannot drift after start-up; ``overrides`` carries any other
librdkafka property (dot.case) untouched, the way Quix Streams' ``ConnectionConfig`` does.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
# librdkafka's message.max.bytes default: the largest record (key + value + headers + its framing)
# produce() accepts; ``overrides`` may change it (make_producer's producer reports the value in use)
LIBRDKAFKA_MESSAGE_MAX_BYTES = 1_000_000
# librdkafka defaults to CRC32 ("consistent_random"); Java clients and Spark's Kafka sink use
# murmur2. Every producer Ballast ships uses murmur2 so a key lands where a JVM client puts it.
KAFKA_JAVA_PARTITIONER = "murmur2_random"


class _OncePerMinute(logging.Filter):
    """Drop a librdkafka line already seen in the last minute (numbers ignored when comparing).

    A client that cannot reach its broker repeats the same "Connection refused" line for every
    retry; the first one says all there is to say.
    """

    def __init__(self) -> None:
        super().__init__()
        self._seen: dict[str, float] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        key = re.sub(r"\d+", "#", record.getMessage())
        last = self._seen.get(key)
        if last is not None and record.created - last < 60:
            return False
        if len(self._seen) > 1000:
            self._seen.clear()
        self._seen[key] = record.created
        return True


# librdkafka's own log goes through Python logging (WARNING and up, de-duplicated) instead of
# straight to stderr: every client Ballast builds from a KafkaConfig gets this logger.
LIBRDKAFKA_LOGGER = logging.getLogger("ballast.librdkafka")
LIBRDKAFKA_LOGGER.setLevel(logging.WARNING)
LIBRDKAFKA_LOGGER.addFilter(_OncePerMinute())


def quiet_retried_warnings() -> None:
    """For one-shot programs (a CLI command, the demo): librdkafka's errors show, its warnings do not.

    A one-shot program that fails says so itself; librdkafka's warnings about what it retries by
    itself (a transaction coordinator still loading on a fresh broker, a refreshed leader) would
    only be noise there. Services keep WARNING: they run for days and their log is where such
    retries belong.
    """
    LIBRDKAFKA_LOGGER.setLevel(logging.ERROR)


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

    def with_overrides(self, **props: Any) -> KafkaConfig:
        """A copy with more librdkafka properties (keys may use ``_`` for ``.``)."""
        merged = dict(self.overrides)
        merged.update({k.replace("_", "."): v for k, v in props.items()})
        return replace(self, overrides=merged)

    def common(self) -> dict[str, Any]:
        return {
            "bootstrap.servers": self.bootstrap_servers,
            "client.id": self.client_id,
            "logger": LIBRDKAFKA_LOGGER,
        }

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
