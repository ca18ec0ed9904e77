"""The reduce's follower of the control topic: one :class:`OwnershipView` per Python worker process.

Where it starts: at the latest snapshot that carries the history (``TableSnapshot.history``, which
the controller writes every ``--snapshot-every`` epochs), else at the log's origin. A fresh worker
folds at most one snapshot interval before its first question, whatever the log's length, and only
reads older events again when a question needs them (the view's ``loader``: from the latest such
snapshot at or before the epoch asked). It keeps at most about ``2 * retain`` epochs of detail plus
the history (:meth:`OwnershipView.forget`). docs/reduce.md, "The control log in a worker", has the
measured figures.

Why the log's end is resolved from the *offsets* the batch read (:meth:`OwnershipLog.epoch_through`)
and not from the control records' keys: anything can be produced to the control topic, and a key
that claims an epoch the log never reaches made every task wait for it until its deadline. The
epoch after the records up to an offset is a function of the log, the same in a replay.
"""

from __future__ import annotations

import bisect
import time
from collections import Counter
from collections.abc import Iterable
from typing import Any

from ballast.control.log import SNAPSHOT_EVERY, ControlLogReader, Folded, SkippedRecord
from ballast.control.state import ControlLogError, initial_state
from spark_jobs.reduce.ownership import OwnershipView

# epochs of detail a worker keeps below the log's end (it keeps more while questions need it)
RETAIN = 2 * SNAPSHOT_EVERY


class OwnershipLog:
    """An :class:`OwnershipView` kept up to date from the control topic (module docstring)."""

    def __init__(self, kafka: Any, topic: str, routed_partitions: int, retain: int = RETAIN) -> None:
        self.kafka = kafka
        self.topic = topic
        self.routed_partitions = routed_partitions
        self.retain = retain
        self.timeout = 60.0
        self.skipped: Counter[str] = Counter()  # control records skipped, per reason (all readers)
        self.loads = 0  # times older detail was read again for a question
        self._read_before = 0  # records read by the readers this log closed
        self._reader = self._open()
        self.view = OwnershipView(routed_partitions, loader=self._load)
        # (offset, epoch after it) of every event folded, from the floor on: the log's end as of an offset
        self._offsets: list[int] = []
        self._epochs: list[int] = []
        self._snapshots: list[tuple[int, int]] = []  # (epoch, offset) of the snapshots with a history seen

    def _open(self, **where: Any) -> ControlLogReader:
        return ControlLogReader(
            self.kafka, self.topic, initial_state(self.routed_partitions), history=True,
            on_skip=self._skip, **where,
        )  # fmt: skip

    def _skip(self, record: SkippedRecord) -> None:
        self.skipped[record.reason] += 1

    @property
    def records_read(self) -> int:
        """Control records consumed by every reader this log opened (searches for a start included)."""
        return self._read_before + self._reader.records_read

    def _fold(
        self, view: OwnershipView, records: Iterable[Folded], offsets: list[int], epochs: list[int]
    ) -> None:
        for f in records:
            view.apply(f.event)
            offsets.append(f.offset)
            epochs.append(view.epoch)

    def _poll(
        self, view: OwnershipView, reader: ControlLogReader, offsets: list[int], epochs: list[int]
    ) -> None:
        self._fold(view, reader.poll_records(timeout=0.2), offsets, epochs)
        seen = set(self._snapshots)
        self._snapshots.extend(s for s in reader.history_snapshots if s not in seen)
        self._snapshots.sort()

    def ensure(self, epoch: int, timeout: float = 60.0) -> OwnershipView:
        """The view, folded at least to ``epoch`` (which the caller saw in its data, so it exists)."""
        self.timeout = timeout
        deadline = time.monotonic() + timeout
        while self.view.epoch < epoch:
            if time.monotonic() > deadline:
                raise ControlLogError(
                    f"control log: epoch {epoch} was seen in the data but the log reached only "
                    f"{self.view.epoch} within {timeout:g} s"
                )
            self._poll(self.view, self._reader, self._offsets, self._epochs)
        if self.view.forget(self.retain):
            keep = bisect.bisect_left(self._epochs, self.view.floor)
            self._offsets, self._epochs = self._offsets[keep:], self._epochs[keep:]
        return self.view

    def epoch_through(self, offset: int, timeout: float = 60.0) -> int:
        """The log's epoch after its records up to ``offset`` (a control record the caller read)."""
        self.timeout = timeout
        deadline = time.monotonic() + timeout
        while (self._reader.next_offset or 0) <= offset:
            if time.monotonic() > deadline:
                raise ControlLogError(
                    f"control log: offset {offset} was read by the batch but not by the worker "
                    f"within {timeout:g} s"
                )
            self._poll(self.view, self._reader, self._offsets, self._epochs)
        i = bisect.bisect_right(self._offsets, offset) - 1
        if i >= 0:
            return self._epochs[i]
        return self._epoch_at_offset(offset)

    def _epoch_at_offset(self, offset: int) -> int:
        """Before what this fold kept: fold again from the latest snapshot at or before ``offset``."""
        reader = ControlLogReader(
            self.kafka, self.topic, initial_state(self.routed_partitions), scan_below=offset + 1
        )
        try:
            epoch = -1
            deadline = time.monotonic() + self.timeout
            while (reader.next_offset or 0) <= offset:
                if time.monotonic() > deadline:
                    raise ControlLogError(f"control log: offset {offset} not read within {self.timeout:g} s")
                for f in reader.poll_records(timeout=0.2):
                    if f.offset <= offset:
                        epoch = int(f.event["epoch"])
            return epoch
        finally:
            reader.close()

    def _load(self, epoch: int) -> OwnershipView:
        """A view folded from the latest snapshot with a history at or before ``epoch`` (or the
        origin) up to this one's epoch; its reader replaces the current one."""
        self.loads += 1
        known = [o for e, o in self._snapshots if e <= epoch]
        if known:
            reader = self._open(start_offset=known[-1])
        else:
            below = min((o for _e, o in self._snapshots), default=self._reader.start_offset)
            reader = self._open(before_epoch=epoch, scan_below=below)
        view = OwnershipView(self.routed_partitions, loader=self._load)
        offsets: list[int] = []
        epochs: list[int] = []
        target = self.view.epoch
        last = (time.monotonic(), view.epoch)
        try:
            while view.epoch < target:
                if view.epoch != last[1]:
                    last = (time.monotonic(), view.epoch)
                elif time.monotonic() - last[0] > self.timeout:
                    raise ControlLogError(
                        f"control log: reading it again from epoch {epoch}: no progress for "
                        f"{self.timeout:g} s at epoch {view.epoch} (reading to {target})"
                    )
                self._poll(view, reader, offsets, epochs)
        except BaseException:
            self._read_before += reader.records_read
            reader.close()
            raise
        self._read_before += self._reader.records_read
        self._reader.close()
        self._reader, self._offsets, self._epochs = reader, offsets, epochs
        return view

    def close(self) -> None:
        self._reader.close()


_SHARED: dict[tuple[Any, str, int], OwnershipLog] = {}


def shared_log(kafka: Any, topic: str, routed_partitions: int) -> OwnershipLog:
    """One log follower per Python worker process and control topic (Spark reuses its workers)."""
    key = (kafka.connection, topic, routed_partitions)
    log = _SHARED.get(key)
    if log is None:
        log = _SHARED[key] = OwnershipLog(kafka, topic, routed_partitions)
    return log
