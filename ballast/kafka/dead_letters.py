"""The dead-letter topic's contract: the headers every dead letter carries, and reading them back.

Why one module: the router and the reduce both dead-letter records (the router the input record
itself, the reduce a routed record by its position), and operators, the demo and the tests read
them; the header names are that contract and live here only (docs/router.md, "Dead letters").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

REASON = "ballast.error.reason"
DETAIL = "ballast.error.detail"
SOURCE_TOPIC = "ballast.source.topic"
SOURCE_PARTITION = "ballast.source.partition"
SOURCE_OFFSET = "ballast.source.offset"
JOB = "ballast.job"  # the reduce job that refused the record
CONTROLLER = "ballast.controller"  # the controller that found a record on its control log that is no event

# every router dead letter carries all of them, in this order (new names are appended: consumers
# may have relied on the first six); the reduce's carry the first five and JOB, the controller's
# (for control-topic records that are no event) the first five and CONTROLLER
DLQ_HEADERS = (
    REASON,
    DETAIL,
    SOURCE_TOPIC,
    SOURCE_PARTITION,
    SOURCE_OFFSET,
    "ballast.router.id",
    "ballast.error.class",
    "ballast.source.bytes",
    "ballast.source.key.bytes",
)


@dataclass(frozen=True)
class DeadLetter:
    """One dead letter as read back: why, and where the record it stands for was.

    ``event``: free for a reader that resolves the position to its own notion of the record (the
    tests put the index of the event there)."""

    reason: str
    detail: str
    topic: str
    partition: int
    offset: int
    value: bytes | None = None
    job: str = ""
    event: int | None = None

    @classmethod
    def of(cls, message: Any) -> DeadLetter:
        """From a consumed ``confluent_kafka.Message`` of the dead-letter topic."""
        h = {k: (v or b"").decode("utf-8", "replace") for k, v in (message.headers() or [])}
        return cls(
            h.get(REASON, ""),
            h.get(DETAIL, ""),
            h.get(SOURCE_TOPIC, ""),
            int(h.get(SOURCE_PARTITION) or -1),
            int(h.get(SOURCE_OFFSET) or -1),
            message.value(),
            h.get(JOB, ""),
        )
