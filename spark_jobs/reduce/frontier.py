"""A worker's frontier: the epoch every input partition has announced in its routed partition.

Why the minimum over input partitions: the router that owns input partition p writes a marker
covering p into every routed partition before the first record it routes under a new epoch, and
markers are cumulative (docs/router.md, "The frontier rule"). So once every input partition of the
job is covered by a marker >= e in worker W's partition, no record of an epoch below e can still
arrive at W: W has seen everything epoch e moves away, and may ship it (Chi's barrier on every
channel). The set of input partitions comes from the input topics' metadata, never from which
routers happen to be alive: a dead router's partitions hold the frontier back until their new
owner announces them, which is exactly what safety needs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping


def partition_id(topic: str, partition: int) -> str:
    return f"{topic}:{partition}"


class InputFrontier:
    """Highest marker epoch seen per input partition; the frontier is their minimum (-1: none)."""

    def __init__(self, partitions: Iterable[str], seen: Mapping[str, int] | None = None) -> None:
        self.partitions = tuple(sorted(set(partitions)))
        if not self.partitions:
            raise ValueError("a frontier needs at least one input partition")
        self._known = frozenset(self.partitions)
        self.seen: dict[str, int] = {p: int(e) for p, e in (seen or {}).items() if p in self._known}

    @property
    def frontier(self) -> int:
        return min(self.seen.get(p, -1) for p in self.partitions)

    def observe(self, epoch: int, covers: Iterable[str]) -> int:
        """Fold one marker (``covers``: its ``topic:partition`` ids); returns the frontier after it.
        Partitions outside the job are ignored (a router reading more topics covers them too)."""
        for pid in covers:
            if pid in self._known and epoch > self.seen.get(pid, -1):
                self.seen[pid] = int(epoch)
        return self.frontier
