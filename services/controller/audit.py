"""The controller's watch over its own log: each record on it that is no event gets one dead letter.

Why the controller writes them, and no other reader: every reader of the control log skips such a
record (:mod:`ballast.control.log`: bytes that are no ``ControlEvent``, an event no state could
take where it stands) and logs and counts it; if every reader dead-lettered it, N routers and M
reduce processes would write N + M copies. The controller is the log's one writer and folds it at
start anyway. It keeps that reader following the log (:meth:`ControlAudit.poll`, once a pass of
its loop) and writes the dead letter of each record it skips in its next transaction, together
with the control topic's offset it has read up to, committed in its own consumer group
(``<prefix>.controller``, where the requests' offsets are). An aborted transaction takes both back
(the controller folds the log again, and finds the records again); a restarted or standby
controller starts from that offset, reading from the latest snapshot at or before it, so a record
is dead-lettered once across restarts and fencing.

Why it also watches for foreign events (:meth:`ControlAudit.foreign`): on an unsigned log an event
someone else appended is folded by every reader, and the controller's next event, numbered from
its own state, would be a conflicting duplicate at that epoch, skipped by every reader. So before
each transaction that appends, the controller reads its log to the end and refuses to write when
the log went past its own last epoch, or when an event of its own was skipped as a duplicate
(``run``: one line, exit 4). On a signed log a forged event is skipped by every reader and
changes nothing, and a replayed record of its own is an identical duplicate: only the epoch check
runs there (a second holder of the key could trip it).

Without a controller running (a deployment driven by ``ballast control send`` alone) nothing is
dead-lettered; the readers' warnings and counters still say what they skipped. A controller that
never committed an offset (the first run on a log) audits from where its fold starts.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from typing import TYPE_CHECKING

from ballast.control.log import ControlLogReader, SkippedRecord
from ballast.control.state import ControlLogError, ControlState

if TYPE_CHECKING:
    from services.controller.transport import ControlLink

log = logging.getLogger(__name__)


class ControlAudit:
    """Collects the records the controller's reader skips and writes their dead letters once."""

    def __init__(self, link: ControlLink) -> None:
        self.link = link
        self.committed = link.audit_offset()  # audited before it (negative: never)
        self.skipped: Counter[str] = Counter()  # by reason, since this audit started
        self.written = 0  # dead letters written (committed or in the open transaction)
        self.reader: ControlLogReader | None = None
        self._pending: dict[int, SkippedRecord] = {}
        self._start = -1  # the offset the followed reader started at
        # an unsigned log's records skipped as an epoch already folded, not yet looked at
        self.duplicates: list[SkippedRecord] = []

    def skipped_record(self, record: SkippedRecord) -> None:
        """A reader's ``on_skip``: owed a dead letter unless an earlier controller wrote it."""
        self.skipped[record.reason] += 1
        if record.reason == "duplicate-epoch" and self.reader is not None and self.reader.signer is None:
            self.duplicates = [*self.duplicates[-99:], record]
        if record.offset >= self.committed:
            self._pending[record.offset] = record

    def follow(self, reader: ControlLogReader, initial: ControlState, timeout: float = 60.0) -> None:
        """Follow ``reader`` (folded from its start, skipping into :meth:`skipped_record`); first
        audit what lies between the committed offset and where the reader started."""
        self.reader = reader
        self._start = reader.start_offset if reader.start_offset is not None else 0
        if 0 <= self.committed < self._start:
            self._catch_up(initial, timeout)
        if self.committed >= 0:
            self.link.audited(self.committed)

    def _catch_up(self, initial: ControlState, timeout: float) -> None:
        start = self._start

        def before_start(record: SkippedRecord) -> None:
            if record.offset < start:
                self.skipped_record(record)

        reader = ControlLogReader(
            self.link.kafka, self.link.control_topic, initial,
            scan_below=self.committed + 1, on_skip=before_start,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + timeout
            while (reader.next_offset or 0) < start:
                before = reader.next_offset
                reader.poll_records(timeout=0.2)
                if reader.next_offset != before:
                    deadline = time.monotonic() + timeout
                elif time.monotonic() > deadline:
                    raise ControlLogError(
                        f"auditing {self.link.control_topic}: no progress for {timeout:g} s at offset "
                        f"{reader.next_offset} (reading to {start})"
                    )
        finally:
            reader.close()

    def poll(self) -> int:
        """Fold what was appended since (non-blocking); the dead letters now owed."""
        if self.reader is not None:
            self.reader.poll(0.0)
        return len(self._pending)

    def foreign(self, own_epoch: int, own_issuer: str, timeout: float = 10.0) -> str | None:
        """Why the controller must not append now (None: it may): the log, read to its end, holds an
        event past ``own_epoch`` it did not write, or skipped one of its own as a duplicate."""
        reader = self.reader
        if reader is None:
            return None
        if reader.signer is None:
            reader.read_to_end(timeout)  # unsigned: anyone's event counts, so everything up to now
        else:
            reader.poll(0.0)
        if reader.state.epoch > own_epoch:
            return (
                f"the log is at epoch {reader.state.epoch}, past this controller's {own_epoch}: "
                f"an event it did not write"
            )
        duplicates, self.duplicates = self.duplicates, []
        for record in duplicates:
            if self._issuer(record.value) == own_issuer:
                return (
                    f"its own event at offset {record.offset} was skipped by every reader ({record.detail}): "
                    f"another event took that epoch first"
                )
        return None

    def _issuer(self, value: bytes | None) -> str | None:
        try:
            return str(self.link.events.decode(value)["issuer"])
        except Exception:  # a record skipped as a duplicate decoded once; anything else is not ours
            return None

    def before_commit(self) -> None:
        """Inside the controller's open transaction: the dead letters owed, and the offset read."""
        if self.reader is None:
            return
        for offset in sorted(self._pending):
            record = self._pending[offset]
            self.link.dead_letter(record)
            self.written += 1
            log.warning(
                "controller: dead-lettered control record %s@%d (%s): %s",
                record.topic, record.offset, record.reason, record.detail,
            )  # fmt: skip
        self._pending.clear()
        if self.reader.next_offset is not None:
            self.link.audited(self.reader.next_offset)

    def close(self) -> None:
        if self.reader is not None:
            self.reader.close()
            self.reader = None
