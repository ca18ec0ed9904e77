"""The control log on Kafka: the reader that folds the topic (the writer: :mod:`ballast.control.writer`).

Why the reader starts at the latest snapshot: the control topic is kept forever, so folding it
from offset 0 makes every restart slower than the last. The reader finds the latest
``TABLE_SNAPSHOT`` that records the routed partitions by reading the log *backwards* in chunks
(1,024 offsets, doubling; only the type of each record is read, :mod:`ballast.control.peek`),
folds from there with the mutable :class:`~ballast.control.state.StateBuilder`, and gives up
only when it makes no progress for ``timeout`` seconds, not after a fixed total. The writer appends
a snapshot every :data:`SNAPSHOT_EVERY` epochs, so a restart folds at most that many events. A
reader that needs the history (:mod:`ballast.control.history`: the control writers, the reduce)
starts at the latest snapshot that carries it, or at the origin when none does (a log written
before snapshots carried it: folded from its origin once, until a writer appends one).

Why a record that is not an event is skipped, not fatal: anything with write access to the topic
can append bytes (a plain producer, a mistyped topic name); one such record used to stop every
router, fail every reduce task and keep a restarted controller from reading its own log. A record
that does not decode as a ``ControlEvent``, or an event that no state could take where it stands
(invalid content, an epoch that is not the next one, an epoch already folded), is skipped: a
warning, a count per reason (:attr:`ControlLogReader.skipped`) and the reader's ``on_skip`` hook (the
controller's writes the one dead letter, see :mod:`services.controller.audit`), and the next genuine
event applies. A duplicate epoch with other content is skipped too: the first event at an epoch is
the log's, for every reader alike (a reader starting at a later snapshot sees the same state), and
stopping would hand the pipeline to whoever appends one (a replayed record is such a duplicate).

Why signatures (:mod:`ballast.control.signing`): on a log whose genesis names a key, a record
without a valid signature of that key is skipped (``unsigned``, ``bad-signature``) before it is
decoded, and no fold starts at an unsigned snapshot; a forged event at the next epoch then changes
nothing, and the controller's own event at that epoch applies.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from ballast.avro.codec import AvroCodec
from ballast.control.genesis import Genesis, GenesisMissingError, missing_message
from ballast.control.peek import peek
from ballast.control.signing import SigningError, VerifyKey, genesis_key, pinned_key_from_env
from ballast.control.state import (
    CONTROL_SCHEMA,
    ControlLogError,
    ControlState,
    DuplicateEpochError,
    EpochGapError,
    InvalidEventError,
    StateBuilder,
    is_base_snapshot,
    snapshot_history,
)
from ballast.kafka.clients import leader_settling
from ballast.kafka.configuration import KafkaConfig
from ballast.kafka.identities import scratch_group
from ballast.waiting import WaitTimeout, wait_until

log = logging.getLogger(__name__)

# the writer appends a TABLE_SNAPSHOT once this many epochs passed since the last one
SNAPSHOT_EVERY = 1000
# offsets read per step of the backward search for the latest snapshot (doubles at every step)
SCAN_CHUNK = 1024


def record_time_ms(message: Any) -> int | None:
    """A consumed record's Kafka timestamp in ms (the writer's CreateTime, or the broker's
    LogAppendTime on a topic configured so), None when the record has none."""
    from confluent_kafka import TIMESTAMP_NOT_AVAILABLE

    kind, ms = message.timestamp()
    return None if kind == TIMESTAMP_NOT_AVAILABLE or ms < 0 else int(ms)


class Folded(NamedTuple):
    """An event a reader folded, with its record's Kafka timestamp (None: none) and offset."""

    event: dict[str, Any]
    time_ms: int | None
    offset: int


@dataclass(frozen=True)
class SkippedRecord:
    """A control record a reader skipped: where, why (``reason``: one of :data:`SKIP_REASONS`),
    and the record itself for its dead letter."""

    topic: str
    offset: int
    reason: str
    detail: str
    key: bytes | None
    value: bytes | None


SKIP_REASONS = (
    "unsigned",  # a signed log: no signature
    "bad-signature",  # a signed log: a signature that does not verify with the genesis's key
    "undecodable",
    "invalid-event",
    "epoch-gap",
    "duplicate-epoch",  # an epoch already folded, with other content (or content no longer kept)
)


class ControlLogReader:
    """Follows the single-partition control topic (read_committed) and folds it.

    Not in a consumer group: every reader sees every event. ``read_to_end`` blocks until the state
    reflects everything committed when it was called; ``poll`` is non-blocking and returns the new
    events folded since the last call (the caller decides when to apply them).

    Where it starts: by default at the latest snapshot that records the routed partitions; with
    ``start_offset``, at the first such snapshot at or after it (``0``: the genesis, the whole
    log). Either way epoch 0 comes from the log; ``initial`` (default: nothing known) only supplies
    the routed partitions the reader expects, and a log without genesis raises
    :class:`~ballast.control.genesis.GenesisMissingError`. ``require_genesis=False`` is the fold of a
    log written before the genesis existed: from ``start_offset`` (default 0) over ``initial``.

    ``history=True``: the state carries the history (:mod:`ballast.control.history`), so the reader
    starts at the latest snapshot that has it (with ``before_epoch``: the latest whose epoch is at
    most that), else at the origin. ``scan_below``: the backward search for the start begins below
    this offset (default: the log's end). Records that are not events are skipped (module
    docstring): :attr:`skipped` counts them per reason, ``on_skip`` gets each one. Work done, for
    whoever must bound it: :attr:`records_read` (every record consumed, the search included) and
    :attr:`events_folded`.

    Signatures: the log's genesis names the key (:attr:`signer`, None for an unsigned log);
    ``public_key`` (default: ``BALLAST_CONTROL_PUBLIC_KEY``) pins it, and a log whose genesis names
    another key, or none, is refused (:class:`ControlLogError`).
    """

    def __init__(
        self,
        kafka: KafkaConfig,
        topic: str,
        initial: ControlState | None = None,
        start_offset: int | None = None,
        *,
        require_genesis: bool = True,
        history: bool = False,
        before_epoch: int | None = None,
        scan_below: int | None = None,
        on_skip: Callable[[SkippedRecord], None] | None = None,
        public_key: VerifyKey | None = None,
    ) -> None:
        from confluent_kafka import Consumer

        self.topic = topic
        self.state = initial if initial is not None else ControlState(num_workers=1)
        self.codec = AvroCodec(CONTROL_SCHEMA)
        self.require_genesis = require_genesis
        self.last_snapshot_epoch: int | None = None  # of the last snapshot folded that records partitions
        self.history = history
        self.before_epoch = before_epoch
        self.on_skip = on_skip
        self.pinned = public_key if public_key is not None else pinned_key_from_env()
        self.signer: VerifyKey | None = None  # the key the genesis names (None: unsigned, or not read yet)
        self.skipped: Counter[str] = Counter()
        self.records_read = 0
        self.events_folded = 0
        self.start_offset: int | None = None  # the offset of the snapshot the fold started at
        # (epoch, offset) of every snapshot with a history folded (where a later fold can start)
        self.history_snapshots: list[tuple[int, int]] = []
        self._scan_below = scan_below
        self._builder = StateBuilder(self.state, history=history)
        self._start_offset = start_offset
        self._next_offset: int | None = None  # None until the reader knows where to start
        self._tp = TopicPartition(topic, 0)
        self.consumer = Consumer(
            kafka.consumer(
                scratch_group("control-reader"),
                **{"isolation.level": "read_committed", "fetch.wait.max.ms": 50},
            )
        )
        if not require_genesis:
            self._assign(start_offset or 0)

    # --- positions --------------------------------------------------------------------------------

    def _assign(self, offset: int) -> None:
        self._next_offset = offset
        self.consumer.assign([TopicPartition(self.topic, 0, offset)])

    def bounds(self, timeout: float = 30.0) -> tuple[int, int]:
        """(low, high) watermarks; a control topic whose leader is not elected yet is waited for.

        A router is often started right after ``ballast topics create``: a leader election in
        progress is not a reason to crash.
        """

        def watermarks() -> tuple[int, int] | None:
            try:
                return self.consumer.get_watermark_offsets(self._tp, timeout=min(timeout, 5.0), cached=False)
            except KafkaException as exc:
                err = exc.args[0]
                if leader_settling(err):
                    return None
                raise

        try:
            return wait_until(watermarks, timeout, f"the end of control topic {self.topic}", interval=0.2)
        except WaitTimeout as exc:
            raise ControlLogError(str(exc)) from None

    def _position(self) -> int:
        return self.consumer.position([self._tp])[0].offset

    def _records(self, start: int, end: int, timeout: float) -> Iterator[Any]:
        """The committed records (messages) in [start, end); raises after ``timeout``
        seconds without progress (an open transaction in the range is waited for until then)."""
        self.consumer.assign([TopicPartition(self.topic, 0, start)])
        done = start
        last_progress = time.monotonic()
        while done < end:
            msgs = self.consumer.consume(1000, timeout=0.2)
            for m in msgs:
                self._check(m)
                if m.error() is not None:
                    continue
                if m.offset() >= end:
                    return
                done = m.offset() + 1
                self.records_read += 1
                yield m
            position = self._position()
            if position >= end:
                return
            if msgs or position > done:
                done = max(done, position)
                last_progress = time.monotonic()
            elif time.monotonic() - last_progress > timeout:
                raise ControlLogError(
                    f"reading control topic {self.topic}: no progress for {timeout:g} s at offset {done} "
                    f"(reading to {end})"
                )

    def _check(self, m: Any) -> None:
        err = m.error()
        if err is not None and err.code() != KafkaError._PARTITION_EOF:
            raise ControlLogError(f"control topic error: {err}")

    def _decode(self, offset: int, value: bytes | None) -> dict[str, Any]:
        try:
            return self.codec.decode(value, self.topic, 0, offset)
        except Exception as exc:
            raise ControlLogError(f"undecodable control event at offset {offset}: {exc}") from exc

    def _base_at(self, m: Any) -> dict[str, Any] | None:
        """The decoded event when the record is a snapshot that records the routed partitions (and
        a fold could start at it: a record that is not an event, or not signed, is no start)."""
        offset, value = m.offset(), m.value()
        seen = peek(value)
        if seen is not None and seen[1] != "TABLE_SNAPSHOT":
            return None
        if self.signer is not None and self._refused(self.signer, m):
            return None
        try:
            event = self._decode(offset, value)
        except ControlLogError:
            return None
        if not is_base_snapshot(event):
            return None
        try:
            StateBuilder(ControlState(num_workers=1)).apply(event)
        except InvalidEventError:
            return None
        return event

    def _first_base(self, start: int, end: int, timeout: float) -> tuple[Any, dict[str, Any]] | None:
        for m in self._records(start, end, timeout):
            event = self._base_at(m)
            if event is not None:
                return m, event
        return None

    def _usable(self, m: Any) -> bool:
        """Whether the fold may start at this record: any base snapshot; with the history, only
        one that carries it, at most at :attr:`before_epoch`."""
        if self.history and self.before_epoch is not None:
            seen = peek(m.value())
            if seen is not None and seen[0] > self.before_epoch:
                return False
        event = self._base_at(m)
        if event is None:
            return False
        if not self.history:
            return True
        return snapshot_history(event) is not None and (
            self.before_epoch is None or int(event["epoch"]) <= self.before_epoch
        )

    def _latest_base(self, low: int, high: int, timeout: float) -> int | None:
        """Offset of the latest snapshot the fold may start at, reading backwards in growing chunks."""
        end, size = high, SCAN_CHUNK
        while end > low:
            start = max(low, end - size)
            found = None
            for m in self._records(start, end, timeout):
                if self._usable(m):
                    found = m.offset()
            if found is not None:
                return found
            end, size = start, size * 2
        return None

    def genesis(self, timeout: float = 30.0) -> Genesis | None:
        """The log's genesis (its first snapshot that records the routed partitions), or None.

        A new log begins with it, so this reads one record; a re-based old log reads up to it.
        """
        low, high = self.bounds(timeout)
        found = self._first_base(low, high, timeout) if high > low else None
        if self._next_offset is not None:
            self._assign(self._next_offset)  # back to where the fold is
        return None if found is None else Genesis.of(found[1])

    def _refused(self, signer: VerifyKey, m: Any) -> str | None:
        return signer.check(self.topic, m.key(), m.value(), m.headers())

    def _learn_signer(self, genesis: Any | None) -> None:
        """The key the genesis names becomes the one every later record must carry (module
        :mod:`ballast.control.signing`); a pinned key must be that one."""
        signer = None
        if genesis is not None:
            try:
                signer = genesis_key(genesis.headers())
            except SigningError as exc:
                raise ControlLogError(f"control log {self.topic}: its genesis names no key: {exc}") from None
            if signer is not None and self._refused(signer, genesis):
                raise ControlLogError(
                    f"control log {self.topic}: its genesis (offset {genesis.offset()}) is not signed by the "
                    f"key it names ({signer.id}): no writer of Ballast wrote it"
                )
        if self.pinned is not None and signer != self.pinned:
            named = "no key (an unsigned log)" if signer is None else f"key {signer.id}"
            raise ControlLogError(
                f"control log {self.topic}: its genesis names {named}, but this process pins key "
                f"{self.pinned.id} (BALLAST_CONTROL_PUBLIC_KEY): refusing to follow it"
            )
        if signer is None and self.signer is None:
            log.debug("control log %s is unsigned: anyone who can write it steers the pipeline", self.topic)
        self.signer = signer

    def _locate(self, timeout: float) -> None:
        """Choose where the fold starts (see the class docstring) and assign the consumer there."""
        low, high = self.bounds(timeout)
        first = self._first_base(low, high, timeout) if high > low else None
        self._learn_signer(None if first is None else first[0])
        if self._start_offset is None:
            below = high if self._scan_below is None else min(high, self._scan_below)
            offset = self._latest_base(low, below, timeout) if below > low else None
            if offset is None and self.history and first is not None:  # none has it: the origin
                offset = first[0].offset()
        else:
            first = self._first_base(max(low, self._start_offset), high, timeout) if high > low else None
            offset = None if first is None else first[0].offset()
        if offset is None:
            raise GenesisMissingError(missing_message(self.topic))
        self.start_offset = offset
        self._assign(offset)

    # --- folding ----------------------------------------------------------------------------------

    def _fold_messages(self, msgs: list) -> list[Folded]:
        events: list[Folded] = []
        builder = self._builder
        try:
            for m in msgs:
                self._check(m)
                if m.error() is not None:
                    continue
                self.records_read += 1
                offset = m.offset()
                if self.signer is not None:
                    refused = self._refused(self.signer, m)
                    if refused is not None:
                        self._next_offset = offset + 1
                        self._skip(m, refused, f"not signed by the control log's key {self.signer.id}")
                        continue
                try:
                    event = self._decode(offset, m.value())
                except ControlLogError as exc:
                    self._next_offset = offset + 1
                    self._skip(m, "undecodable", str(exc.__cause__ or exc))
                    continue
                self._next_offset = offset + 1
                base = is_base_snapshot(event)
                if self.require_genesis and not builder.started and not base:
                    raise GenesisMissingError(missing_message(self.topic))
                try:
                    applied = builder.apply(event)
                except InvalidEventError as exc:
                    self._skip(m, "invalid-event", str(exc))
                    continue
                except EpochGapError as exc:
                    self._skip(m, "epoch-gap", str(exc))
                    continue
                except DuplicateEpochError as exc:
                    self._skip(m, "duplicate-epoch", str(exc))
                    continue
                if applied:
                    self.events_folded += 1
                    events.append(Folded(event, record_time_ms(m), offset))
                    if base:
                        self.last_snapshot_epoch = builder.epoch
                        if self.history and snapshot_history(event) is not None:
                            self.history_snapshots.append((builder.epoch, offset))
        finally:
            self.state = builder.state()  # the state after the last event folded without error
        return events

    def _skip(self, m: Any, reason: str, detail: str) -> None:
        """A record that is not the next event: counted, said, handed to ``on_skip``; never fatal."""
        self.skipped[reason] += 1
        log.warning(
            "control log %s: skipping the record at offset %d (%s): %s",
            self.topic, m.offset(), reason, detail,
        )  # fmt: skip
        if self.on_skip is not None:
            self.on_skip(SkippedRecord(self.topic, m.offset(), reason, detail, m.key(), m.value()))

    @property
    def next_offset(self) -> int | None:
        """The offset after the last record folded or skipped (None before the reader starts)."""
        return self._next_offset

    def poll(self, timeout: float = 0.0, max_events: int = 1000) -> list[dict[str, Any]]:
        """New (non-duplicate) events folded into :attr:`state`, in epoch order.

        The first call of a reader that has not read yet finds its start first (blocking).
        """
        return [event for event, _ms in self.poll_timed(timeout, max_events)]

    def poll_timed(
        self, timeout: float = 0.0, max_events: int = 1000
    ) -> list[tuple[dict[str, Any], int | None]]:
        """:meth:`poll`, each event with its record's Kafka timestamp (None when the broker gave
        none): when the event was appended."""
        return [(f.event, f.time_ms) for f in self.poll_records(timeout, max_events)]

    def poll_records(self, timeout: float = 0.0, max_events: int = 1000) -> list[Folded]:
        """:meth:`poll`, each event with its record's timestamp and offset."""
        if self._next_offset is None:
            self._locate(30.0)
        return self._fold_messages(self.consumer.consume(max_events, timeout=timeout))

    def read_to_end(self, timeout: float = 30.0) -> list[dict[str, Any]]:
        """Fold everything committed up to now (the high watermark when called).

        ``timeout`` bounds the time without progress (no new offset read), not the total: a long
        log is read to its end however long that takes, a stuck one fails after ``timeout``.
        """
        return [event for event, _ms in self.read_to_end_timed(timeout)]

    def read_to_end_timed(self, timeout: float = 30.0) -> list[tuple[dict[str, Any], int | None]]:
        """:meth:`read_to_end`, each event with its record's Kafka timestamp (see :meth:`poll_timed`)."""
        return [(f.event, f.time_ms) for f in self.read_to_end_records(timeout)]

    def read_to_end_records(self, timeout: float = 30.0) -> list[Folded]:
        """:meth:`read_to_end`, each event with its record's timestamp and offset."""
        if self._next_offset is None:
            self._locate(timeout)
        _low, high = self.bounds(timeout)
        events: list[Folded] = []
        last = (time.monotonic(), self._position())
        while True:
            position = self._position()
            if high <= 0 or position >= high:
                return events
            if position != last[1]:
                last = (time.monotonic(), position)
            elif time.monotonic() - last[0] > timeout:
                raise ControlLogError(
                    f"reading control topic {self.topic}: no progress for {timeout:g} s at offset "
                    f"{max(position, 0)} (reading to {high})"
                )
            events.extend(self.poll_records(timeout=0.2))

    def close(self) -> None:
        self.consumer.close()
