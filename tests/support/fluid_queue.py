"""A fluid model of the pipeline the shedding policy steers: the shedding tests' independent truth.

Why its own model: the policy reasons in rates, budgets and estimated backlogs; if the tests judged
it with the same arithmetic, a wrong formula would agree with itself. Here nothing is estimated:
the queue is simulated record-mass by record-mass in small time steps, and lag is *measured* the
way Ballast measures it (the age of the oldest unread record). It imports nothing from
``services.shedder``.

The pipeline: streams offer records at given rates; each is shed at its keep-probability *before*
the queue (the router sheds while routing, so records already routed are read whatever is shed
after them); the kept records of all streams join one FIFO queue (the routed topic); one server
of fixed capacity (records/s, the reduce) takes from its head, oldest first. So each stream's
share of the capacity is its share of the records at the head: ``backlog += (arrival * keep -
share of capacity) * dt`` per stream, with FIFO deciding the share.

What it measures per cycle, like the shedder service would: the time lag, the records processed
per second (the capacity only while a backlog lasts; otherwise just the kept load), each stream's
offered rate and its backlog, and the lag's trend over the cycle.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass
class _Slice:
    """Records that arrived during one time step: when, and how many of each stream are left."""

    time: float
    left: dict[str, float]

    def total(self) -> float:
        return sum(self.left.values())


class FluidPipeline:
    def __init__(self, topics: list[str], capacity: float, dt: float = 0.05) -> None:
        self.topics = list(topics)
        self.capacity = capacity
        self.dt = dt
        self.now = 0.0
        self.queue: deque[_Slice] = deque()
        self.processed = 0.0
        self.offered = dict.fromkeys(self.topics, 0.0)

    def advance(self, seconds: float, rates: Mapping[str, float], keeps: Mapping[str, float]) -> None:
        """Run ``seconds`` with offered ``rates`` (records/s) shed at ``keeps``."""
        for _ in range(round(seconds / self.dt)):
            kept = {t: rates[t] * keeps[t] * self.dt for t in self.topics}
            for t in self.topics:
                self.offered[t] += rates[t] * self.dt
            self.queue.append(_Slice(self.now, kept))
            self.now += self.dt
            budget = self.capacity * self.dt
            while budget > 0 and self.queue:
                head = self.queue[0]
                total = head.total()
                if total <= budget:
                    budget -= total
                    self.processed += total
                    self.queue.popleft()
                    continue
                # part of the head slice: its streams are mixed, so each gives its share
                take = budget / total
                for t in head.left:
                    head.left[t] -= head.left[t] * take
                self.processed += budget
                budget = 0.0

    def lag_s(self) -> float:
        """Age of the oldest record not yet processed (0 when everything is read)."""
        while self.queue and self.queue[0].total() <= 1e-9:
            self.queue.popleft()
        return self.now - self.queue[0].time if self.queue else 0.0

    def backlog(self) -> dict[str, float]:
        out = dict.fromkeys(self.topics, 0.0)
        for piece in self.queue:
            for t, n in piece.left.items():
                out[t] += n
        return out
