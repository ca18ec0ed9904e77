"""Mixed routing ``F(k) = A[k] if k in A else h(k)``: the contract between planner and router.

The router (a separate service) imports :class:`RoutingTable` and calls :meth:`RoutingTable.route`
once per record, so routing is exactly one dict lookup plus, on a miss, one Kafka murmur2 hash.
The table stores only *deviations* from the hash (``A[k] != h(k)``): that keeps it small (the
paper's ``|A| <= A_max``) and makes "hash-only Ballast" identical to a plain Kafka producer.

Stable public names: ``RoutingTable``, ``RoutingTable.route``, ``RoutingTable.entries``,
``RoutingTable.num_workers``, ``RoutingTable.epoch``, ``route`` (module-level helper).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

from ballast.routing.murmur2 import kafka_partition


class RoutingTable(Mapping[bytes, int]):
    """Immutable routing table for ``num_workers`` workers; a ``Mapping`` of the deviating keys only.

    Construction drops entries equal to the hash destination (they would be no-ops and would
    inflate ``|A|``) and rejects out-of-range workers, so every instance satisfies the invariant
    the planners and the router rely on.
    """

    __slots__ = ("_entries", "epoch", "num_workers")

    def __init__(self, num_workers: int, entries: Mapping[bytes, int] | None = None, epoch: int = 0):
        if num_workers <= 0:
            raise ValueError("num_workers must be positive")
        self.num_workers = num_workers
        self.epoch = epoch
        clean: dict[bytes, int] = {}
        for key, worker in (entries or {}).items():
            worker = int(worker)
            if not 0 <= worker < num_workers:
                raise ValueError(f"worker {worker} out of range for key {key!r}")
            if worker != kafka_partition(key, num_workers):
                clean[bytes(key)] = worker
        self._entries = clean

    # -- hot path -------------------------------------------------------------------------------
    def route(self, key: bytes) -> int:
        """Worker for ``key``: one dict lookup, and one murmur2 only when the key is not pinned."""
        worker = self._entries.get(key)
        if worker is None:
            return kafka_partition(key, self.num_workers)
        return worker

    # -- Mapping protocol (over the deviating entries) -------------------------------------------
    def __getitem__(self, key: bytes) -> int:
        return self._entries[key]

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def entries(self) -> dict[bytes, int]:
        """A copy of the deviating entries (safe to serialise or mutate)."""
        return dict(self._entries)

    def with_changes(self, changes: Mapping[bytes, int], epoch: int | None = None) -> RoutingTable:
        """New table with ``changes`` applied; a change back to ``h(k)`` deletes the entry."""
        merged = dict(self._entries)
        merged.update(changes)
        return RoutingTable(self.num_workers, merged, self.epoch + 1 if epoch is None else epoch)

    def route_many(self, keys: Iterable[bytes]) -> list[int]:
        return [self.route(k) for k in keys]

    def __repr__(self) -> str:
        return f"RoutingTable(num_workers={self.num_workers}, entries={len(self)}, epoch={self.epoch})"


def route(key: bytes, table: Mapping[bytes, int], num_workers: int) -> int:
    """``F(k)`` for a plain dict table (no invariant checks): the reference semantics used in tests."""
    worker = table.get(key)
    return kafka_partition(key, num_workers) if worker is None else worker
