"""ControlFollower: the router's view of the control log (fold at start, then non-blocking polls).

Why the router folds the log to its end before routing anything (from the latest snapshot, see
:mod:`ballast.control.log`): a record routed under a stale table would land in the wrong partition
with no marker to tell a worker so. Afterwards it polls before
every batch, and between the slices of a consume() wait that finds no input, without waiting; the
loop decides when the new epochs take effect (at a transaction boundary), so this object only
reports them.
"""

from __future__ import annotations

from typing import Protocol

from ballast.control.state import ControlState
from ballast.waiting import WaitTimeout, wait_until
from services.router.errors import RouterError


class ControlSource(Protocol):
    """What the follower needs of :class:`ballast.control.log.ControlLogReader` (tests pass a stub)."""

    topic: str
    state: ControlState

    def read_to_end(self, timeout: float = 30.0) -> list[dict]: ...

    def poll(self, timeout: float = 0.0, max_events: int = 1000) -> list[dict]: ...

    def close(self) -> None: ...


class ControlFollower:
    """Follows one control log; :attr:`state` is everything folded so far."""

    def __init__(self, reader: ControlSource) -> None:
        self.reader = reader
        self.state: ControlState = reader.state

    def start(self, timeout: float = 30.0) -> ControlState:
        """Fold everything committed so far (blocks; waits out a control topic still electing its
        leader); a broken log raises ``ControlLogError``."""
        self.reader.read_to_end(timeout)
        self.state = self.reader.state
        return self.state

    def poll(self) -> list[int]:
        """Epochs folded since the last call, in order (empty: nothing new); never blocks."""
        before = self.state.epoch
        events = self._read(0)
        return [epoch for epoch in (int(e["epoch"]) for e in events) if epoch > before]

    def catch_up(self, epoch: int, timeout: float) -> ControlState:
        """Fold until the state reaches ``epoch`` (blocks): an earlier owner of a partition routed
        it under ``epoch``, so routing it under an older table would send its epochs backwards."""
        if self.state.epoch >= epoch:
            return self.state

        def reached() -> bool:
            self._read(0.2)
            return self.state.epoch >= epoch

        try:
            wait_until(
                reached, timeout, f"control log {self.reader.topic} at epoch {epoch}", interval=0,
                describe=lambda: f"folded up to epoch {self.state.epoch}",
            )  # fmt: skip
        except WaitTimeout as exc:
            raise RouterError(
                f"{exc}: a partition was committed under epoch {epoch}, which this control log "
                "does not reach (is it the log the previous owner followed?)"
            ) from None
        return self.state

    def _read(self, timeout: float) -> list[dict]:
        """Fold what the reader has (waiting up to ``timeout``); a broken log stops the router."""
        try:
            events = self.reader.poll(timeout)
        except Exception as exc:
            raise RouterError(f"control log: {exc}") from exc
        self.state = self.reader.state
        return events

    def close(self) -> None:
        self.reader.close()
