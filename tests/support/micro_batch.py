"""A micro-batch reduce in simulated time, for tests of the shedder's policy (no Spark, no Kafka).

Why a model of its own beside :mod:`tests.support.fluid_queue`: a fluid queue serves records as
they come, so its lag is smooth and its processing rate is its capacity whenever it is backlogged.
Spark's micro-batch loop is not so gentle. A trigger every ``trigger_s``; a batch reads everything
routed so far and takes a fixed cost plus a cost per record; a batch that overruns the trigger is
followed at once by the next. Its time lag is Kafka's (the age of the oldest record after its last
finished batch's end offsets), a saw-tooth of a batch or two even when it keeps up. Stalls (a
garbage collection, a noisy neighbour on a shared machine) lengthen some batches by seconds.
Every finished batch is reported as a :class:`~services.shedder.capacity.BatchCost`, as its
``ReduceProgress`` would be.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from services.shedder.capacity import BatchCost, with_batch


@dataclass
class MicroBatchReduce:
    """A micro-batch reduce (module docstring); times in simulated seconds."""

    rng: random.Random
    capacity: float  # records per busy second at large batches (the per-record cost's inverse)
    overhead_s: float = 0.9
    trigger_s: float = 2.0
    stall_p: float = 0.08
    stall_max_s: float = 5.0
    queue: list[list[float]] = field(default_factory=list)  # [append time, kept records] after the position
    in_batch: int = 0  # chunks at the head of the queue the running batch read
    busy_until: float = -1.0
    next_trigger: float = 0.0
    batch_id: int = 0
    batches: tuple[BatchCost, ...] = ()
    batch: BatchCost | None = None  # the running batch, reported when it ends
    processed: float = 0.0

    def step(self, now: float) -> None:
        if self.busy_until >= 0 and now >= self.busy_until:
            rows = sum(n for _t, n in self.queue[: self.in_batch])
            del self.queue[: self.in_batch]
            self.processed += rows
            assert self.batch is not None
            self.batches = with_batch(self.batches, self.batch, 60.0)
            self.busy_until, self.in_batch = -1.0, 0
        if self.busy_until < 0 and now >= self.next_trigger:
            self.in_batch = len(self.queue)
            rows = sum(n for _t, n in self.queue)
            stall = self.rng.uniform(0, self.stall_max_s) if self.rng.random() < self.stall_p else 0.0
            took = self.overhead_s + rows / self.capacity + stall
            self.busy_until = now + took
            self.batch = BatchCost(self.batch_id, round(rows), took, now + took)
            self.batch_id += 1
            self.next_trigger = now + max(self.trigger_s, took)

    def lag_s(self, now: float) -> float:
        return now - self.queue[0][0] if self.queue else 0.0

    def backlog(self) -> float:
        return sum(n for _t, n in self.queue)
