"""Every topic Ballast uses, declared in one place, and an idempotent, conflict-checking creator.

Why one module: the routed topic's partition count *is* the number of logical workers (one unit of
Spark state each, fixed by the checkpoint after the first run), the control topic must have exactly
one partition (the total order of control events) and keep it forever. A topic that exists with
other settings would silently break those guarantees, so :func:`ensure_topics` refuses it instead.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

DAY_MS = 24 * 3600 * 1000

ROLES = ("input", "routed", "control", "metrics", "output", "dead_letter")


@dataclass(frozen=True)
class TopicSpec:
    """What a topic must look like: name, partitions and the configs Ballast depends on."""

    role: str
    name: str
    partitions: int
    config: Mapping[str, str] = field(default_factory=dict)
    value_schema: str | None = None
    doc: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "config", MappingProxyType(dict(self.config)))
        if self.partitions < 1:
            raise ValueError(f"topic {self.name}: partitions must be >= 1")


@dataclass(frozen=True)
class TopicLayout:
    """The topics of one Ballast deployment (a prefix keeps several deployments, or tests, apart)."""

    prefix: str = "ballast"
    workers: int = 8
    input_partitions: int = 4
    metrics_partitions: int = 1

    def specs(self) -> dict[str, TopicSpec]:
        p = self.prefix
        return {
            "input": TopicSpec(
                "input",
                f"{p}.input",
                self.input_partitions,
                {},
                "io.ballast.InputEvent",
                "Events from producers or Kafka Connect sources (Avro InputEvent, JSON or plain strings).",
            ),
            "routed": TopicSpec(
                "routed",
                f"{p}.routed",
                self.workers,
                {},
                "io.ballast.RoutedEnvelope",
                "One partition per logical worker (N_max); data records, epoch markers and state chunks.",
            ),
            "control": TopicSpec(
                "control",
                f"{p}.control",
                1,
                {"cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1"},
                "io.ballast.ControlEvent",
                "The control log: one partition (total order), kept forever, written only by the controller.",
            ),
            "metrics": TopicSpec(
                "metrics",
                f"{p}.metrics",
                self.metrics_partitions,
                {"retention.ms": str(7 * DAY_MS)},
                "io.ballast.MetricsRecord",
                "Router key statistics, worker statistics and lag samples, per interval.",
            ),
            "output": TopicSpec(
                "output",
                f"{p}.output",
                self.workers,
                {},
                "io.ballast.OutputResult",
                "Aggregates per key and window, with their accuracy under shedding.",
            ),
            "dead_letter": TopicSpec(
                "dead_letter",
                f"{p}.dead-letter",
                1,
                {"retention.ms": str(30 * DAY_MS)},
                None,
                "Records no service could process, unchanged, with the reason in headers.",
            ),
        }

    def name(self, role: str) -> str:
        return self.specs()[role].name


class TopicConflictError(RuntimeError):
    """A topic exists with a partition count or config that contradicts its declaration."""


def find_conflicts(spec: TopicSpec, partitions: int, config: Mapping[str, str]) -> list[str]:
    """Differences between a declared topic and the one on the cluster (empty list: compatible)."""
    problems = []
    if partitions != spec.partitions:
        problems.append(f"{spec.name}: has {partitions} partitions, Ballast needs {spec.partitions}")
    for key, wanted in spec.config.items():
        actual = config.get(key)
        if actual != wanted:
            problems.append(f"{spec.name}: {key}={actual}, Ballast needs {key}={wanted}")
    return problems


def ensure_topics(
    admin: object,
    specs: Mapping[str, TopicSpec] | list[TopicSpec],
    replication: int = -1,
    timeout: float = 30.0,
) -> dict[str, str]:
    """Create missing topics and verify existing ones; returns ``{topic: "created" | "exists"}``.

    ``replication=-1`` lets the broker use ``default.replication.factor``. Raises
    :class:`TopicConflictError` listing every mismatch, without changing anything.
    """
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import NewTopic

    wanted = list(specs.values()) if isinstance(specs, Mapping) else list(specs)
    existing = _partition_counts(admin, {s.name for s in wanted}, timeout)
    result: dict[str, str] = {}

    missing = [s for s in wanted if s.name not in existing]
    if missing:
        futures = admin.create_topics(  # type: ignore[attr-defined]
            [NewTopic(s.name, s.partitions, replication, config=dict(s.config)) for s in missing],
            operation_timeout=timeout,
        )
        for name, fut in futures.items():
            try:
                fut.result()
                result[name] = "created"
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise
                # created concurrently by another process: verify it like any existing topic
                existing |= _partition_counts(admin, {name}, timeout, must_exist=True)

    to_check = [s for s in wanted if s.name not in result]
    problems: list[str] = []
    if to_check:
        configs = _describe_topic_configs(admin, [s.name for s in to_check], timeout)
        for s in to_check:
            problems += find_conflicts(s, existing[s.name], configs[s.name])
            result[s.name] = "exists"
    if problems:
        raise TopicConflictError(
            "existing topics contradict Ballast's layout (nothing was changed):\n  " + "\n  ".join(problems)
        )
    return result


def _describe_topic_configs(admin: object, names: list[str], timeout: float) -> dict[str, dict[str, str]]:
    """Topic configs by name; retries while a just-created topic is not yet known to every broker."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import ConfigResource

    deadline = time.monotonic() + timeout
    while True:
        described = admin.describe_configs([ConfigResource("topic", n) for n in names])  # type: ignore[attr-defined]
        try:
            return {res.name: {k: v.value for k, v in fut.result().items()} for res, fut in described.items()}
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _partition_counts(
    admin: object, names: set[str], timeout: float, must_exist: bool = False
) -> dict[str, int]:
    """Partition counts of those ``names`` that exist, waiting out topics still being created.

    Right after creation a topic can be listed with no partitions (or LEADER_NOT_AVAILABLE) until
    metadata propagates; counting it as 0 would be a false conflict.
    """
    deadline = time.monotonic() + timeout
    while True:
        topics = admin.list_topics(timeout=timeout).topics  # type: ignore[attr-defined]
        present = {n: topics[n] for n in names if n in topics}
        settling = [n for n, t in present.items() if t.error is not None or not t.partitions]
        if must_exist:
            settling += [n for n in names if n not in present]
        if not settling or time.monotonic() > deadline:
            return {n: len(t.partitions) for n, t in present.items()}
        time.sleep(0.2)
