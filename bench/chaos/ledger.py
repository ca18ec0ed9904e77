"""The campaign's own record of every input record it produced, as the broker acknowledged it.

Why its own record, and not the routed topic: the judge's reference must not come from the code it
judges. Every record the campaign writes to the input topic (the stream, the skewed producer's, the
junk, the flush events) is entered here before it is sent, with its key, value and event time, and
gets its partition and offset from the producer's delivery report. A record whose delivery failed
is not in the topic and is left out of the reference. Dead letters name a record by its input
position (the router's) or by a routed record that carries it (the reduce's), so the ledger's
(partition, offset) is how a letter is matched to the record it stands for.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

DATA, SKEWED, JUNK, FLUSH = "data", "skewed", "junk", "flush"
KINDS = (DATA, SKEWED, JUNK, FLUSH)


class Ledger:
    """Appended to by the producers' threads, acknowledged from their delivery callbacks."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.kind: list[int] = []
        self.key: list[str] = []
        self.value: list[float] = []
        self.time: list[int] = []
        self.partition: list[int] = []
        self.offset: list[int] = []

    def add(self, kind: str, key: str, value: float, event_time: int) -> int:
        """A record about to be sent; its index (give it to :meth:`ack`)."""
        with self._lock:
            self.kind.append(KINDS.index(kind))
            self.key.append(key)
            self.value.append(value)
            self.time.append(event_time)
            self.partition.append(-1)
            self.offset.append(-1)
            return len(self.kind) - 1

    def ack(self, index: int, err: Any, msg: Any) -> None:
        """A delivery report: where the record is (nothing recorded for a failed delivery)."""
        if err is None:
            self.partition[index] = msg.partition()
            self.offset[index] = msg.offset()

    def __len__(self) -> int:
        return len(self.kind)

    def columns(self) -> Records:
        with self._lock:
            return Records(
                kind=np.array([KINDS[k] for k in self.kind], dtype=object),
                key=np.array(self.key, dtype=object),
                value=np.array(self.value, dtype=float),
                time=np.array(self.time, dtype=np.int64),
                partition=np.array(self.partition, dtype=np.int64),
                offset=np.array(self.offset, dtype=np.int64),
            )


@dataclass(frozen=True)
class Records:
    """The ledger as columns (one row per record sent; ``partition`` -1: not delivered)."""

    kind: np.ndarray
    key: np.ndarray
    value: np.ndarray
    time: np.ndarray
    partition: np.ndarray
    offset: np.ndarray

    @property
    def delivered(self) -> np.ndarray:
        return self.partition >= 0

    def index_of(self) -> dict[tuple[int, int], int]:
        """(partition, offset) -> record index, over the delivered records."""
        ok = np.flatnonzero(self.delivered)
        return {(int(self.partition[i]), int(self.offset[i])): int(i) for i in ok}
