"""Releasing a slice: one input transaction, routed by the placement's router process as one.

Why a transaction on the input side: the router runs as its own process (``ballast router run``)
and nobody can step it any more. It consumes read_committed, so a slice produced as one
transaction appears to it at once; with ``--commit-when-idle`` it routes all of it and commits
it, as one transaction, at the first poll that finds nothing more. Spark's read_committed source
then sees the slice whole, in every routed partition.

Why the commit is timed: a query that is idle when the router commits lists the partitions'
offsets at whole multiples of its trigger interval (wall clock), and one that lists them while
the router's commit markers are on some partitions only reads the slice in two batches. The
in-process benchmark delayed the *router's* commit to the middle of the trigger cycle; here the
router commits by itself, a routing delay after the input's commit, so the *input* commit is
delayed instead: to the middle of the cycle minus the routing delay, estimated from the last
slices (the time from the input commit until the router group's committed offsets cover the
slice). A miss is still caught: the batch is classified ``partial`` (:mod:`bench.reduce.batches`).
"""

from __future__ import annotations

import statistics
import time

from ballast.harness.pipeline import Pipeline
from ballast.kafka.clients import DeliveryTracker, make_producer, produce_waiting
from bench.reduce.params import WAIT_S

FIRST_DELAY_S = 0.3  # the routing delay assumed before one was measured
RECENT = 5  # slices whose routing delays make the estimate (median)


class SliceRelease:
    """Writes slices into one placement's input topic and waits until its router has routed them."""

    def __init__(self, pipe: Pipeline, router: str, trigger_ms: int) -> None:
        self.pipe = pipe
        self.router = router
        self.cycle_s = trigger_ms / 1000
        self.topic = pipe.layout.name("input")
        name = f"{pipe.layout.prefix}-bench-input"
        self.producer = make_producer(
            pipe.kafka.with_client_id(name), **{"transactional.id": name, "linger.ms": 5}
        )
        self.producer.init_transactions(60)
        self.released = 0  # input records released so far (all routed once release returns)
        self.delays_s: list[float] = []

    def release(self, records: list[tuple[bytes, bytes]]) -> dict[int, int]:
        """Produce ``records`` in one transaction, committed on time; once routed, the routed topic's ends."""
        tracker = DeliveryTracker()
        self.producer.begin_transaction()
        for key, value in records:
            produce_waiting(self.producer, self.topic, value, key, tracker)
        self.producer.flush(120)
        tracker.raise_if_failed()
        self._wait_for_the_commit_moment()
        self.producer.commit_transaction(60)
        committed = time.monotonic()
        self._wait_routed(self.released + len(records))
        self.delays_s.append(time.monotonic() - committed)
        self.released += len(records)
        return self.pipe.routed_ends()

    def routing_delay_s(self) -> float:
        """The expected time from the input's commit to the router's (median of the last slices)."""
        return statistics.median(self.delays_s[-RECENT:]) if self.delays_s else FIRST_DELAY_S

    def _wait_for_the_commit_moment(self) -> None:
        """Sleep until the router's commit would land in the middle fifth of a trigger cycle."""
        cycle = self.cycle_s
        lands = (time.time() + self.routing_delay_s()) % cycle
        if not 0.4 * cycle <= lands < 0.6 * cycle:
            time.sleep((0.5 * cycle - lands) % cycle)

    def _wait_routed(self, target: int) -> None:
        """Until the router group's committed input offsets reach ``target`` (polled often: the
        time it takes is the routing delay the next commit is timed with)."""
        deadline = time.monotonic() + WAIT_S
        while True:
            if self.pipe.routed() >= target:
                return
            self.pipe.check_running(self.router)
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.router}: {self.pipe.routed()} of {target} input records routed")
            time.sleep(0.01)

    def close(self) -> None:
        self.producer.flush(30)
