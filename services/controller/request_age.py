"""How long a request waited in the requests topic, on one clock: the broker's (pure).

Why not the sender's ``issued_at``: a request is refused as ``expired`` when it waited longer than
``--request-ttl-s`` (its sender gave up; applying it later would surprise it), and ``now -
issued_at`` compares the controller's clock with the sender's. A shedder whose clock was a minute
behind had every request refused; one ahead could never see a request expire.

What instead: the requests topic keeps ``message.timestamp.type=LogAppendTime``, so each request
carries the time its partition's leader appended it. "Now" on that same clock is read by an append
of the controller's own, a *clock probe* (:meth:`~services.controller.transport.ControlLink.probe_clock`):
the leader stamps it and the delivery report returns the stamp. Between probes the reading is
carried forward on the controller's monotonic clock (:class:`BrokerClock`), which measures a
duration, never a date. A request's wait is then two stamps of one broker apart, however wrong any
host's calendar is.

Errors, and which way they fall: the probe's stamp is taken somewhere between its send and its
acknowledgement, and the reading is anchored at the acknowledgement, so the estimate of the broker's
now is late by at most one round trip: a wait is never over-estimated by the probe. A broker
clock stepped since the last probe can make a wait look longer; so a request is refused as expired
only against a probe taken for the batch that holds it (:func:`needs_fresh_probe`). A record
without an append time (a requests topic left at CreateTime) or a broker clock not read has an
unknown wait, and an unknown wait never expires: the controller applies a late request rather than
refusing a fresh one for good.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME

# the kind of the controller's own clock probes in the requests topic: consumed, never answered
PROBE_KIND = "CLOCK_PROBE"


def append_time_ms(timestamp: tuple[int, int]) -> int | None:
    """A consumed record's broker append time (ms) from ``Message.timestamp()``; None unless the
    topic stamps LogAppendTime (a CreateTime is the writer's clock)."""
    kind, ms = timestamp
    return int(ms) if kind == TIMESTAMP_LOG_APPEND_TIME and ms >= 0 else None


@dataclass
class BrokerClock:
    """The requests partition leader's clock, read by a probe and carried forward on ours.

    ``stamp_ms``: the probe's append time; ``read_at``: our monotonic seconds when its
    acknowledgement arrived; ``batch``: the batch it was read for (a refusal needs one of its own).
    """

    stamp_ms: int | None = None
    read_at: float = 0.0
    batch: int = -1

    def read(self, stamp_ms: int | None, at: float, batch: int) -> None:
        """A probe's outcome; None (no append time, no answer) keeps the last reading."""
        if stamp_ms is not None:
            self.stamp_ms, self.read_at, self.batch = int(stamp_ms), at, batch

    def now_ms(self, at: float) -> int | None:
        """The broker's time at our monotonic ``at`` (None: never read)."""
        if self.stamp_ms is None:
            return None
        return self.stamp_ms + round((at - self.read_at) * 1000)


def waits_ms(appended: Sequence[int | None], broker_now_ms: int | None) -> list[int | None]:
    """Each record's wait in the topic (ms, at least 0); None where it cannot be told on one clock."""
    if broker_now_ms is None:
        return [None] * len(appended)
    return [None if a is None else max(0, broker_now_ms - a) for a in appended]


def needs_fresh_probe(waits: Sequence[int | None], ttl_ms: int, clock: BrokerClock, batch: int) -> bool:
    """Whether a wait would refuse a request while the reading is not this batch's own."""
    return clock.batch != batch and any(w is not None and w > ttl_ms for w in waits)


@dataclass
class RequestAges:
    """Each batch's waits: the records' append times against the broker's clock, read by ``probe``
    (an append of our own; its stamp, or None) at the first batch that needs it and again before a
    wait would refuse a request. ``on_unaged`` is called once when a record has no append time."""

    ttl_ms: int
    probe: Callable[[], int | None]
    on_unaged: Callable[[], None] = lambda: None
    monotonic: Callable[[], float] = time.monotonic
    clock: BrokerClock = field(default_factory=BrokerClock)
    batches: int = 0
    unaged_said: bool = False

    def waits(self, appended: Sequence[int | None]) -> list[int | None]:
        """The waits (ms) of one batch's requests, given their append times (None: unknown)."""
        self.batches += 1
        if not self.ttl_ms or not appended:
            return [None] * len(appended)
        if None in appended and not self.unaged_said:
            self.unaged_said = True
            self.on_unaged()
        if all(a is None for a in appended):
            return [None] * len(appended)
        if self.clock.stamp_ms is None:
            self._read()
        waits = waits_ms(appended, self.clock.now_ms(self.monotonic()))
        if needs_fresh_probe(waits, self.ttl_ms, self.clock, self.batches):
            self._read()
            if self.clock.batch != self.batches:  # no fresh reading: a stale one refuses nobody
                return [None] * len(appended)
            waits = waits_ms(appended, self.clock.now_ms(self.monotonic()))
        return waits

    def _read(self) -> None:
        stamp = self.probe()
        self.clock.read(stamp, self.monotonic(), self.batches)
