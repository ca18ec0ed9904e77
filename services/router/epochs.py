"""The router's epoch as offset-commit metadata: the first half of the frontier rule.

Why with the offsets: the epoch a partition is routed under from an offset on is committed with that
offset (``ballast-epoch=<e>``, inside the transaction under exactly-once), so the next owner of the
partition learns it at assignment and catches up with the control log to it before routing
anything; a partition's epochs never go back when it changes hands (docs/router.md, "The frontier
rule"). The :class:`~ballast.kafka.checkpoint.Checkpoint` carries the metadata; what it means is
the router's.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from confluent_kafka import TopicPartition

log = logging.getLogger(__name__)

EPOCH_METADATA = "ballast-epoch="


def epoch_metadata(epoch: int) -> str:
    """The offset-commit metadata that records the epoch a partition is routed under."""
    return f"{EPOCH_METADATA}{epoch}"


def epoch_of(metadata: str | None) -> int:
    """The epoch in a committed offset's metadata; 0 when there is none (an older router, or no
    commit yet): epoch 0 is below every epoch, so it never holds a router back."""
    if metadata and metadata.startswith(EPOCH_METADATA):
        try:
            return max(0, int(metadata[len(EPOCH_METADATA) :]))
        except ValueError:
            pass
    if metadata:
        log.warning("ignoring foreign offset metadata %r", metadata[:100])
    return 0


def committed_epoch(committed: Iterable[TopicPartition]) -> int:
    """The highest epoch earlier owners committed for these partitions (0: none)."""
    return max((epoch_of(tp.metadata) for tp in committed), default=0)
