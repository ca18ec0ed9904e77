"""Mixed routing ``F(k) = A[k] if k in A else h(k)``: the one routing function of Ballast.

The control-log fold keeps its table as a :class:`RoutingTable`, the router's per-epoch route cache
fills itself from :meth:`RoutingTable.route` (services/router/routes.py), the planners' plans
materialise into one, and the tests compute expected partitions with it; nothing else computes
``F(k)``. The table stores only *deviations* from the hash (``A[k] != h(k)``): that keeps it small
(the paper's ``|A| <= A_max``) and makes "hash-only Ballast" identical to a plain Kafka producer.

Keys are bytes (what Kafka carries). A routable key is non-empty UTF-8 (it is written into Avro
``string`` fields downstream); :func:`check_key` is the one place that says so.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from ballast.routing.murmur2 import kafka_partition


class InvalidKeyError(ValueError):
    """A key that cannot be routed; ``reason`` is the dead-letter reason code."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def check_key(key: bytes | None) -> bytes:
    """``key`` if it can be routed, else :class:`InvalidKeyError` (``missing-key`` / ``malformed``)."""
    if not key:
        raise InvalidKeyError("missing-key", "empty key")
    try:
        key.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidKeyError("malformed", "key is not UTF-8") from None
    return key


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

    @classmethod
    def from_clean(cls, num_workers: int, entries: dict[bytes, int], epoch: int = 0) -> RoutingTable:
        """A table over ``entries`` that already satisfy the invariant (in range, none equal to
        the hash home), without re-hashing every key; the table takes ``entries`` over.

        Why: the control fold's :class:`~ballast.control.state.StateBuilder` keeps its entries
        clean incrementally, and re-validating a 10,000-key table costs tens of milliseconds each
        time it hands out a state. Everyone else uses the validating constructor.
        """
        table = cls.__new__(cls)
        table.num_workers = num_workers
        table.epoch = epoch
        table._entries = entries
        return table

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

    def __eq__(self, other: object) -> bool:
        if isinstance(other, RoutingTable):
            return self.num_workers == other.num_workers and self._entries == other._entries
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"RoutingTable(num_workers={self.num_workers}, entries={len(self)}, epoch={self.epoch})"
