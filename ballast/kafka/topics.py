"""Every topic Ballast uses, declared in one place, and an idempotent, conflict-checking creator.

Why one module: the routed topic's partition count *is* the number of logical workers (one unit of
Spark state each, fixed by the checkpoint after the first run), the control topic must have exactly
one partition (the total order of control events) and keep it forever. A topic that exists with
other settings would silently break those guarantees, so
:func:`ballast.kafka.admin.ensure_topics` refuses it instead.
This module is pure (no client); the admin calls live in :mod:`ballast.kafka.admin`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from ballast.settings import Settings, setting

DAY_MS = 24 * 3600 * 1000

ROLES = ("input", "routed", "control", "requests", "responses", "metrics", "output", "dead_letter")


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
            "requests": TopicSpec(
                "requests",
                f"{p}.control-requests",
                1,
                # the broker stamps each request's append: the controller ages requests on that one
                # clock, never the sender's (services/controller/request_age.py)
                {"retention.ms": str(7 * DAY_MS), "message.timestamp.type": "LogAppendTime"},
                "io.ballast.ControlRequest",
                "Requests to change the control log (one partition: the controller takes them in order; "
                "stamped with the broker's append time).",
            ),
            "responses": TopicSpec(
                "responses",
                f"{p}.control-responses",
                1,
                {"retention.ms": str(7 * DAY_MS)},
                "io.ballast.ControlResponse",
                "The controller's answer to each request, keyed by request id.",
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


@dataclass(frozen=True)
class LayoutSettings(Settings):
    """The topic layout of one deployment (see :class:`ballast.kafka.topics.TopicLayout`)."""

    prefix: str = setting(
        "ballast", "topic name prefix (keeps deployments apart)", env="BALLAST_TOPIC_PREFIX"
    )
    workers: int = setting(
        8, "logical workers N_max = routed topic partitions (fixed once Spark has state)", minimum=1
    )
    input_partitions: int = setting(4, "partitions of the input topic", minimum=1)
    active_workers: int = setting(
        0,
        "active workers at epoch 0: `topics create` records it in the control log's genesis (0: all "
        "routed partitions); elsewhere a non-zero value must match the genesis (0: take it from the log)",
        minimum=0,
    )

    def __post_init__(self) -> None:
        if self.workers < 1 or self.input_partitions < 1 or self.active_workers < 0:
            raise ValueError("workers and input_partitions must be >= 1, active_workers >= 0")

    def layout(self) -> TopicLayout:
        return TopicLayout(prefix=self.prefix, workers=self.workers, input_partitions=self.input_partitions)


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
