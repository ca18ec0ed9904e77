"""A scripted one-partition control topic standing in for ``confluent_kafka.Consumer`` (no broker).

Why a module: the reader's progress tests and its junk-skipping tests both drive
:class:`~ballast.control.log.ControlLogReader` over a log they write record by record, events or
raw bytes, and watch where it reads.
"""

from __future__ import annotations

from dataclasses import dataclass

import confluent_kafka

from ballast.avro.codec import AvroCodec
from ballast.control import state as cs
from ballast.control.signing import PUBLIC_KEY_HEADER, SigningKey


@dataclass
class Msg:
    _offset: int
    _value: bytes | None
    _headers: list[tuple[str, bytes]] | None = None
    _key: bytes | None = None

    def headers(self) -> list[tuple[str, bytes]] | None:
        return self._headers

    def error(self):
        return None

    def offset(self) -> int:
        return self._offset

    def value(self) -> bytes | None:
        return self._value

    def key(self) -> bytes:
        return str(self._offset).encode() if self._key is None else self._key

    def topic(self) -> str:
        return "c"

    def partition(self) -> int:
        return 0

    def timestamp(self) -> tuple[int, int]:
        return 1, 1000 * self._offset  # CreateTime: the reader hands it out with the event


class Clock:
    """A monotonic clock moved only by the scripted consumer (a test patches the reader's with it):
    time is the script's, not how fast a shared machine ran the test."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now


class ScriptedLog:
    """A one-partition log of committed records (events, or raw values as given); delivers one
    record per ``every`` seconds of its :class:`Clock` and nothing at or after ``stall_at`` (a poll
    that finds nothing lasts its whole timeout). ``signed_by``: the events (not raw values) carry
    that key's signature and the first record names it, as a signed log's writers write them;
    ``headers`` replaces the headers of the records at those offsets (a forger's)."""

    def __init__(
        self,
        events: list[dict | bytes | None],
        every: float = 0.0,
        stall_at: int | None = None,
        signed_by: SigningKey | None = None,
        headers: dict[int, list[tuple[str, bytes]]] | None = None,
    ) -> None:
        codec = AvroCodec(cs.CONTROL_SCHEMA)
        self.values = [e if e is None or isinstance(e, bytes) else codec.encode(e) for e in events]
        self.headers: list[list[tuple[str, bytes]] | None] = [None] * len(self.values)
        if signed_by is not None:
            for i, e in enumerate(events):
                if isinstance(e, dict):
                    self.headers[i] = signed_by.headers("c", str(i).encode(), self.values[i])
            self.headers[0] = [*(self.headers[0] or []), (PUBLIC_KEY_HEADER, signed_by.public.raw)]
        for i, h in (headers or {}).items():
            self.headers[i] = h
        self.keys: dict[int, bytes] = {}  # record keys other than the offset (a replayed record's)
        self.every = every
        self.stall_at = len(self.values) if stall_at is None else stall_at
        self.next = 0
        self.reads: list[int] = []  # first offset of every assign: where reads start
        self.clock = Clock()
        self.last_record_at = 0.0  # when the last record was delivered

    def __call__(self, conf: dict) -> ScriptedLog:  # stands in for confluent_kafka.Consumer
        return self

    def assign(self, tps) -> None:
        self.next = tps[0].offset
        self.reads.append(self.next)

    def get_watermark_offsets(self, tp, timeout=None, cached=False) -> tuple[int, int]:
        return 0, len(self.values)

    def position(self, tps):
        return [confluent_kafka.TopicPartition("c", 0, self.next)]

    def consume(self, n: int, timeout: float) -> list[Msg]:
        if self.next >= self.stall_at:
            self.clock.now += timeout
            return []
        self.clock.now += self.every
        self.last_record_at = self.clock.now
        msg = Msg(self.next, self.values[self.next], self.headers[self.next], self.keys.get(self.next))
        self.next += 1
        return [msg]

    def close(self) -> None:
        pass
