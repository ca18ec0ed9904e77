"""The genesis: epoch 0, written into the control log once, instead of derived from each process's flags.

Why: two routers started with different ``--workers`` or ``--active-workers`` used to hash the same
key to different partitions under the same epoch 0, and nothing noticed. Now ``ballast topics
create`` writes a ``TABLE_SNAPSHOT`` at epoch 0 (empty table, the active workers, the routed
partitions) as the first event of the control log; every reader takes epoch 0 from it, and a
process whose flags contradict it refuses to start. Epochs stay dense from 1 after it.

A log written before the genesis existed (events from 1, epoch 0 ambiguous) gets a *re-base*
instead: a snapshot at ``last + 1`` of the log folded over the state ``topics create`` is told,
which records the routed partitions. It is that log's genesis (:attr:`Genesis.epoch` > 0).

``--active-workers 0`` means "no opinion": a new genesis uses every routed partition, an existing one
is kept. A non-zero value must equal the genesis. This module is pure: the checks and the event;
reading and writing happen in :mod:`ballast.control.log`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ballast.control.state import ControlLogError, is_base_snapshot


class GenesisMissingError(ControlLogError):
    """The control log has no genesis (topics created by hand, or by an older Ballast)."""


class GenesisConflictError(ControlLogError):
    """Flags, topics and the control log's genesis disagree about the deployment."""


@dataclass(frozen=True)
class Genesis:
    """What a control log says about its deployment: the routed partitions and the active workers."""

    epoch: int
    routed_partitions: int
    active_workers: int

    @classmethod
    def of(cls, event: Mapping[str, Any]) -> Genesis | None:
        """The genesis an event states, or None when it is not one (any snapshot that records the
        routed partitions; the first in the log is the genesis)."""
        if not is_base_snapshot(event):
            return None
        body = event["payload"][1] if isinstance(event["payload"], tuple) else event["payload"]
        return cls(int(event["epoch"]), int(body["routed_partitions"]), int(body["num_workers"]))

    def describe(self) -> str:
        return (
            f"epoch {self.epoch}: {self.routed_partitions} routed partitions, "
            f"{self.active_workers} active workers"
        )


def genesis_snapshot(routed_partitions: int, active_workers: int = 0) -> tuple[str, dict]:
    """(type, body) of the genesis: hash over ``active_workers`` (0: all routed partitions), no table."""
    return "TABLE_SNAPSHOT", {
        "num_workers": active_workers or routed_partitions,
        "table": {},
        "keep_probability": {},
        "routed_partitions": routed_partitions,
        "shed_seed": {},
        "history": None,  # the origin: nothing before it (every field written, as the codec reads it back)
    }


def missing_message(control_topic: str, prefix: str | None = None, workers: int | None = None) -> str:
    """One line: what is missing and the command that writes it."""
    flags = "" if prefix is None else f" --prefix {prefix}"
    flags += "" if workers is None else f" --workers {workers}"
    return (
        f"control log {control_topic} has no genesis (the TABLE_SNAPSHOT that records epoch 0): "
        f"run `ballast topics create{flags}` to write it"
    )


def check_create(recorded: Genesis, control_topic: str, routed_partitions: int, active_workers: int) -> None:
    """``topics create`` re-run on a log with a genesis: fine when the flags agree with it."""
    if recorded.routed_partitions != routed_partitions:
        raise GenesisConflictError(
            f"control log {control_topic}: its genesis ({recorded.describe()}) contradicts the "
            f"{routed_partitions} routed partitions (nothing was changed)"
        )
    if active_workers and active_workers != recorded.active_workers:
        raise GenesisConflictError(
            f"control log {control_topic}: its genesis ({recorded.describe()}) contradicts "
            f"--active-workers {active_workers} (nothing was changed; 0 keeps the recorded value)"
        )


def check_router(
    recorded: Genesis | None,
    control_topic: str,
    prefix: str,
    layout_workers: int,
    routed_topic: str,
    routed_topic_partitions: int,
    active_workers: int,
) -> Genesis:
    """A router's flags and its routed topic against the genesis; the genesis, or a one-line error."""
    if recorded is None:
        raise GenesisMissingError(missing_message(control_topic, prefix, layout_workers))
    if layout_workers != recorded.routed_partitions:
        raise GenesisConflictError(
            f"--workers {layout_workers} contradicts control log {control_topic}: its genesis records "
            f"{recorded.routed_partitions} routed partitions"
        )
    if routed_topic_partitions != recorded.routed_partitions:
        raise GenesisConflictError(
            f"{routed_topic} has {routed_topic_partitions} partitions, but the genesis of {control_topic} "
            f"records {recorded.routed_partitions}: the routed topic changed under the control log"
        )
    if active_workers and active_workers != recorded.active_workers:
        raise GenesisConflictError(
            f"--active-workers {active_workers} contradicts control log {control_topic}: its genesis "
            f"records {recorded.active_workers} active workers at epoch {recorded.epoch} "
            f"(0 takes them from the log)"
        )
    return recorded
