"""Per-interval key statistics of one router, rendered as a ``RouterKeyStats`` metrics record.

Why useful time (``useful_ms``): DS2 sizes the router stage from records per *useful* second
(decode, route, encode, produce), not per second of the interval: a router waiting on an empty
poll, a full producer queue or a commit is not at its capacity. The loop measures each routed
batch without its waits on a full queue; polls and commits happen outside the batch. The time of
an aborted transaction's batches is dropped with their counts: the records come again, with time
of their own.

Why offered *and* kept: shed records never reach a worker, so a balancer that only saw routed
counts would read shedding as low load and undo it; the record carries both. The heavy-hitter
sketch counts *offered* records (every record with a valid key, before shedding): that is the
load the balancer must place, and the bound the record states (``sketch_records``) is the weight
the sketch saw.

Why two layers (``open`` and ``closed``): under exactly-once the counts must agree with what a
``read_committed`` reader can see. Counts of the open transaction stay in :attr:`open` until it
commits (:meth:`committed` moves them to :attr:`closed`) and are dropped when it aborts
(:meth:`aborted`): the records will be read and counted again. The statistics record itself is
written as the last thing of a transaction (:meth:`render`) and the interval restarts only when
that transaction commits, so an abort loses or double-counts nothing. At-least-once has no
aborts: a crash replays records, and their counts, at least once.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from services.router.heavy_hitters import HeavyHitters


@dataclass
class _Counts:
    """Plain counts of one layer; ``keys`` counts offered keys exactly (merged into the sketch
    when the layer closes)."""

    partitions: int
    worker_records: list[int] = field(default_factory=list)
    worker_bytes: list[int] = field(default_factory=list)
    offered: int = 0
    kept: int = 0
    dead_lettered: int = 0
    keys: Counter[bytes] = field(default_factory=Counter)
    first_epoch: int | None = None
    useful_s: float = 0.0

    def __post_init__(self) -> None:
        self.worker_records = self.worker_records or [0] * self.partitions
        self.worker_bytes = self.worker_bytes or [0] * self.partitions

    def add(self, other: _Counts) -> None:
        for i in range(self.partitions):
            self.worker_records[i] += other.worker_records[i]
            self.worker_bytes[i] += other.worker_bytes[i]
        self.offered += other.offered
        self.kept += other.kept
        self.dead_lettered += other.dead_lettered
        self.useful_s += other.useful_s
        if self.first_epoch is None:
            self.first_epoch = other.first_epoch


class IntervalStats:
    """Counts for the current interval: ``open`` (uncommitted) and ``closed`` (committed) layers."""

    def __init__(self, partitions: int, capacity: int, top_k: int, now_ms: int) -> None:
        self.partitions = partitions
        self.top_k = top_k
        self.sketch = HeavyHitters(capacity)  # the closed layer's keys
        self.start_ms = now_ms
        self.open = _Counts(partitions)
        self.closed = _Counts(partitions)
        self._published = False  # a rendered record waits in the open transaction
        self._pending_end = now_ms  # interval_end of that record: where the next interval starts

    def add_batch(
        self,
        worker_records: list[int],
        worker_bytes: list[int],
        offered_keys: list[bytes],
        offered: int,
        kept: int,
        dead: int,
        epoch: int,
        useful_s: float = 0.0,
    ) -> None:
        o = self.open
        o.useful_s += useful_s
        for i, (n, b) in enumerate(zip(worker_records, worker_bytes, strict=True)):
            o.worker_records[i] += n
            o.worker_bytes[i] += b
        o.offered += offered
        o.kept += kept
        o.dead_lettered += dead
        if offered_keys:
            o.keys.update(offered_keys)
        if o.first_epoch is None and offered:
            o.first_epoch = epoch

    def committed(self) -> None:
        """The open transaction (or at-least-once interval) is durable: close its counts; if it
        carried the statistics record, the next interval starts here."""
        if self._published:
            self._restart()
            return
        self.closed.add(self.open)
        if self.open.keys:
            self.sketch.update(self.open.keys)
        self.open = _Counts(self.partitions)

    def aborted(self) -> None:
        """The open transaction is gone, statistics record included: its records come again."""
        self.open = _Counts(self.partitions)
        self._published = False

    def _restart(self) -> None:
        self.open = _Counts(self.partitions)
        self.closed = _Counts(self.partitions)
        self.sketch.reset()
        self.start_ms = self._pending_end
        self._published = False

    def render(self, source: str, epoch: int, now_ms: int) -> dict[str, Any]:
        """A MetricsRecord dict (codec tuple notation) for everything counted so far, closed and
        open; the interval restarts when the transaction it is written into commits."""
        total = _Counts(self.partitions)
        total.add(self.closed)
        total.add(self.open)
        sketch = self.sketch.copy()
        if self.open.keys:
            sketch.update(self.open.keys)
        hh = [
            {"key": k.decode("utf-8", "replace") if isinstance(k, bytes) else str(k), "count": c, "error": e}
            for k, c, e in sketch.top(self.top_k)
        ]
        self._published = True
        self._pending_end = now_ms
        return {
            "source": source,
            "interval_start": self.start_ms,
            "interval_end": now_ms,
            "body": (
                "io.ballast.RouterKeyStats",
                {
                    "epoch": epoch,
                    "first_epoch": epoch if total.first_epoch is None else total.first_epoch,
                    "worker_records": list(total.worker_records),
                    "worker_bytes": list(total.worker_bytes),
                    "offered_records": total.offered,
                    "kept_records": total.kept,
                    "dead_lettered": total.dead_lettered,
                    "heavy_hitters": hh,
                    "sketch_capacity": sketch.capacity,
                    "sketch_records": sketch.total,
                    "useful_ms": round(total.useful_s * 1000),
                },
            ),
        }

    def discard(self, now_ms: int) -> None:
        """Nothing to publish (no partitions owned): start a new interval."""
        self.open = _Counts(self.partitions)
        self.closed = _Counts(self.partitions)
        self.sketch.reset()
        self.start_ms = now_ms
        self._published = False
