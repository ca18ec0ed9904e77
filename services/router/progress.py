"""What a router tells the reduce besides its records: event-time progress and what it shed.

Why: the reduce's watermark follows the slowest input partition (docs/reduce.md, "Time"), and a
window row may say ``exact`` only if no record of its window was shed (docs/results.md). Neither
can be seen from the routed records alone: a stalled partition writes nothing, and a shed record
is not written. So the markers a router writes carry, per input partition it owns, the highest
event time of the records it has read (routed or shed; records refused as ``future`` or
malformed do not count), and, per routed partition, the event-time spans of the records it shed
that routing would have sent there (whole seconds, per input topic, with the lowest keep
probability).

The hot path keeps maxima as order keys (:func:`~ballast.avro.wire.varint6_key`: the 6 bytes of
the event time's varint as an int), decoded only when a marker is written.

Exactly-once: a marker states what the records before it in its transaction hold. An aborted
transaction is re-read from the committed offsets, so the progress goes back to what the last
committed interval stated, and spans not yet written are forgotten (the same records are shed
again by the same draws). A partition that changes hands starts unknown at its new owner: the
reduce keeps the highest value it was ever told.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from ballast.avro.wire import from_varint6_key

TopicPartition = tuple[str, int]


class EventProgress:
    """Per owned input partition, the highest event time read; per routed partition, the shed spans
    still to report (module docstring)."""

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self.key6: dict[TopicPartition, int] = {}  # the loop updates it per record (varint6 order keys)
        self.ms: dict[TopicPartition, int] = {}  # event times whose varint is not 6 bytes
        self._committed: tuple[dict[TopicPartition, int], dict[TopicPartition, int]] = ({}, {})
        self._pending: tuple[dict[TopicPartition, int], dict[TopicPartition, int]] = ({}, {})
        self._said: dict[TopicPartition, int] = {}  # what the last marker said
        self._spans: dict[int, dict[str, dict[int, float]]] = {}  # worker -> topic -> second -> keep
        self._last_written = 0.0

    # --- the loop ---------------------------------------------------------------------------------

    def saw(self, tp: TopicPartition, event_ms: int) -> None:
        """An event time the loop decoded (not a 6-byte varint)."""
        if event_ms > self.ms.get(tp, -1):
            self.ms[tp] = event_ms

    def shed(self, worker: int, topic: str, event_ms: int, keep: float) -> None:
        """A record routing would have sent to ``worker`` was dropped under ``keep``."""
        seconds = self._spans.setdefault(worker, {}).setdefault(topic, {})
        second = event_ms // 1000
        seconds[second] = min(keep, seconds.get(second, 1.0))

    # --- markers ----------------------------------------------------------------------------------

    def highest(self, tp: TopicPartition) -> int | None:
        key = self.key6.get(tp)
        ms = self.ms.get(tp)
        best = from_varint6_key(key) if key is not None else None
        if ms is not None and (best is None or ms > best):
            best = ms
        return best

    def event_times(self, covers: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """What a marker covering ``covers`` says (partitions with nothing read yet: absent)."""
        out = {}
        for tp in covers:
            t = self.highest(tp)
            if t is not None:
                out[tp] = t
        return out

    def spans_for(self, worker: int) -> list[tuple[str, int, int, float]]:
        """The spans to report to ``worker`` (taken: a marker to it carries them)."""
        by_topic = self._spans.pop(worker, {})
        out = []
        for topic, seconds in sorted(by_topic.items()):
            run: list[int] = []
            for second in sorted(seconds):
                if run and second != run[-1] + 1:
                    out.append(_span(topic, run, seconds))
                    run = []
                run.append(second)
            if run:
                out.append(_span(topic, run, seconds))
        return out

    def has_spans(self) -> bool:
        return any(self._spans.values())

    def due(self, covers: Iterable[TopicPartition]) -> bool:
        """A progress marker is owed: spans to report, or an owned partition advanced and the
        progress interval has passed since the last marker."""
        if self.has_spans():
            return True
        if self.interval_s > 0 and time.monotonic() - self._last_written < self.interval_s:
            return False
        return any(self.highest(tp) != self._said.get(tp) for tp in covers)

    def written(self, said: dict[TopicPartition, int]) -> None:
        """A marker set saying ``said`` was written; it is part of the interval being committed."""
        self._said.update(said)
        self._last_written = time.monotonic()

    # --- the checkpoint ---------------------------------------------------------------------------

    def closing(self) -> None:
        """The interval is about to commit: what it holds is remembered (see :meth:`committed`)."""
        self._pending = (dict(self.key6), dict(self.ms))

    def committed(self) -> None:
        """The interval committed: a later rewind goes back to here."""
        self._committed = self._pending

    def rewind(self) -> None:
        """The open transaction was aborted: back to what the last committed interval stated."""
        self.key6.clear()
        self.key6.update(self._committed[0])
        self.ms.clear()
        self.ms.update(self._committed[1])
        self._spans.clear()
        self._said.clear()  # the markers that said it were aborted too

    def forget(self, tps: Iterable[TopicPartition]) -> None:
        """Partitions no longer owned."""
        for tp in tps:
            for table in (self.key6, self.ms, self._committed[0], self._committed[1], self._said):
                table.pop(tp, None)


def _span(topic: str, run: list[int], seconds: dict[int, float]) -> tuple[str, int, int, float]:
    return topic, run[0] * 1000, run[-1] * 1000 + 999, min(seconds[s] for s in run)
