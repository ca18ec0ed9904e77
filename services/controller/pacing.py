"""Paced migration: a plan's key moves go out in steps, the next only once the last is installed.

Why pace at all (Megaphone): moving every key of a plan at one epoch stalls every moved key until
its state arrives, and the stall grows with the state moved; moving a few keys per epoch keeps each
stall short, and waiting for a step to be installed before sending the next is flow control (the
workers never hold more in-flight state than one step). The modes:

* ``all-at-once``: one step with every move (shortest migration, longest stall);
* ``fluid``: one key per step (shortest stalls, longest migration);
* ``batched``: at most ``max_keys`` keys and at most ``max_bytes`` of state per step, in the order
  given (the caller puts the moves that relieve the most load first). A key whose state alone
  exceeds ``max_bytes`` goes in a step of its own: a key's state is never split.

:class:`Migration` is the state machine of one migration in flight. It is pure: it takes
observations (the keys the workers report installed, as ``(key, epoch)`` from ``chunks_installed``,
and the time) and returns what to do. A step counts as installed when every key of it is reported
installed at the step's epoch or later (an older install of the same key, from an earlier move,
does not count). If a step is not installed within ``step_timeout_s`` of being issued, the outcome
is an explicit :class:`StepTimedOut`; then, by ``on_timeout``, the migration either aborts (the
default: a worker that cannot install one step should not be sent the next) or sends the next
step anyway. It never goes on silently.

The migration is bracketed by :class:`Marker` data, the payload of a ``MIGRATION_STEP`` event:
``START`` with every key of the plan, then ``DONE`` with every key once all are installed, or
``ABORT`` with the keys that are not (a timed-out step's missing keys and the steps never sent).
Writing the events and the steps' ``ROUTING_UPDATE`` is the transport's job, not this module's.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from ballast.control.state import migration_step


class Mode(StrEnum):
    ALL_AT_ONCE = "all-at-once"
    FLUID = "fluid"
    BATCHED = "batched"


class OnTimeout(StrEnum):
    ABORT = "abort"
    CONTINUE = "continue"


@dataclass(frozen=True)
class KeyMove:
    """One key to move, from ``source`` to ``target``, with its estimated state size."""

    key: str
    source: int
    target: int
    state_bytes: int = 0


@dataclass(frozen=True)
class PacingSettings:
    """How a plan goes out: the mode, the batch bounds B and S, and the step time-out."""

    mode: Mode = Mode.BATCHED
    max_keys: int = 16
    max_bytes: int = 64 * 1024 * 1024
    step_timeout_s: float = 60.0
    on_timeout: OnTimeout = OnTimeout.ABORT

    def __post_init__(self) -> None:
        object.__setattr__(self, "mode", Mode(self.mode))
        object.__setattr__(self, "on_timeout", OnTimeout(self.on_timeout))
        if self.max_keys < 1:
            raise ValueError(f"max_keys must be >= 1, got {self.max_keys}")
        if self.max_bytes < 1:
            raise ValueError(f"max_bytes must be >= 1, got {self.max_bytes}")
        if self.step_timeout_s <= 0:
            raise ValueError(f"step_timeout_s must be > 0, got {self.step_timeout_s}")


def split_steps(moves: Sequence[KeyMove], settings: PacingSettings) -> list[tuple[KeyMove, ...]]:
    """The moves in steps, in their order, by the settings' mode."""
    keys = [m.key for m in moves]
    if len(set(keys)) != len(keys):
        raise ValueError("a key is moved twice in one plan")
    if settings.mode is Mode.ALL_AT_ONCE:
        return [tuple(moves)] if moves else []
    if settings.mode is Mode.FLUID:
        return [(m,) for m in moves]
    steps: list[tuple[KeyMove, ...]] = []
    step: list[KeyMove] = []
    size = 0
    for m in moves:
        if step and (len(step) + 1 > settings.max_keys or size + m.state_bytes > settings.max_bytes):
            steps.append(tuple(step))
            step, size = [], 0
        step.append(m)
        size += m.state_bytes
    if step:
        steps.append(tuple(step))
    return steps


@dataclass(frozen=True)
class Marker:
    """A ``MIGRATION_STEP`` payload: ``phase`` is START, DONE or ABORT; keys with their workers."""

    migration_id: str
    phase: str
    keys: tuple[str, ...]
    from_workers: tuple[int, ...]
    to_workers: tuple[int, ...]
    reason: str = ""

    @classmethod
    def of(cls, migration_id: str, phase: str, moves: Iterable[KeyMove], reason: str = "") -> Marker:
        moves = tuple(moves)
        return cls(
            migration_id,
            phase,
            tuple(m.key for m in moves),
            tuple(m.source for m in moves),
            tuple(m.target for m in moves),
            reason,
        )

    def payload(self) -> dict:
        """The fields of the schema's ``MigrationStep`` record."""
        return migration_step(
            self.migration_id, self.phase, self.keys, self.from_workers, self.to_workers, self.reason
        )[1]


@dataclass(frozen=True)
class SendStep:
    """Send step ``index`` (a ``ROUTING_UPDATE`` of its moves), then call :meth:`Migration.sent`."""

    index: int
    moves: tuple[KeyMove, ...]


@dataclass(frozen=True)
class StepTimedOut:
    """Step ``index`` was not installed in time: ``missing`` keys were not reported installed."""

    index: int
    missing: tuple[str, ...]
    waited_s: float


Action = Marker | SendStep | StepTimedOut


class Migration:
    """One paced migration in flight (see the module docstring for the protocol)."""

    def __init__(
        self,
        migration_id: str,
        steps: Sequence[Sequence[KeyMove]],
        step_timeout_s: float = 60.0,
        on_timeout: OnTimeout | str = OnTimeout.ABORT,
    ) -> None:
        if step_timeout_s <= 0:
            raise ValueError(f"step_timeout_s must be > 0, got {step_timeout_s}")
        self.migration_id = migration_id
        self.steps = [tuple(s) for s in steps if s]
        self.step_timeout_s = float(step_timeout_s)
        self.on_timeout = OnTimeout(on_timeout)
        self.moves = [m for s in self.steps for m in s]
        self._step_of = {m.key: i for i, s in enumerate(self.steps) for m in s}
        if len(self._step_of) != len(self.moves):
            raise ValueError("a key is moved twice in one migration")
        self.phase = "pending"  # pending -> running -> done | aborted
        self.current = -1
        self.issued_at = 0.0
        self.epochs: dict[int, int] = {}
        self.installed: dict[str, int] = {}  # key -> highest epoch reported installed
        self.timeouts: list[StepTimedOut] = []

    @classmethod
    def plan(cls, migration_id: str, moves: Sequence[KeyMove], settings: PacingSettings) -> Migration:
        return cls(migration_id, split_steps(moves, settings), settings.step_timeout_s, settings.on_timeout)

    @property
    def finished(self) -> bool:
        return self.phase in ("done", "aborted")

    def start(self, now: float) -> list[Action]:
        """``START`` and the first step (``START`` then ``DONE`` when there is nothing to move)."""
        if self.phase != "pending":
            raise RuntimeError(f"migration {self.migration_id} already {self.phase}")
        self.phase = "running"
        actions: list[Action] = [Marker.of(self.migration_id, "START", self.moves)]
        return actions + self._issue(0, now)

    def resume(self, now: float) -> list[Action]:
        """A migration rebuilt from the log before its first step went out: that step now."""
        if self.phase != "running" or self.current >= 0:
            raise RuntimeError(f"migration {self.migration_id} is not waiting for its first step")
        return self._issue(0, now)

    def step_installed(self, index: int) -> bool:
        """Every key of step ``index`` reported installed at its epoch or later."""
        return index in self.epochs and not self._missing(index)

    def sent(self, index: int, epoch: int) -> None:
        """The transport appended step ``index``'s update at ``epoch`` (its installs count from it).

        The step's time-out runs from when it was issued, not from here: a transport that never
        confirms still ends in a time-out."""
        if index != self.current or self.finished:
            raise RuntimeError(f"step {index} is not the step in flight ({self.current}, {self.phase})")
        self.epochs[index] = int(epoch)

    def observe(self, installed: Iterable[tuple[str, int]], now: float) -> list[Action]:
        """Fold installs reported by the workers (``(key, epoch)``) and the time: what to do next."""
        for key, epoch in installed:
            if key in self._step_of and epoch > self.installed.get(key, -1):
                self.installed[key] = int(epoch)
        if self.phase != "running":
            return []
        i = self.current
        missing = self._missing(i)
        if not missing:
            return self._issue(i + 1, now)
        waited = now - self.issued_at
        if waited < self.step_timeout_s:
            return []
        timed_out = StepTimedOut(i, missing, waited)
        self.timeouts.append(timed_out)
        if self.on_timeout is OnTimeout.ABORT:
            return [timed_out, self._end("ABORT")]
        return [timed_out, *self._issue(i + 1, now)]

    def abort(self) -> list[Action]:
        """Abort from outside (e.g. the worker count changes): ``ABORT`` with what is not installed."""
        if self.finished:
            return []
        if self.phase == "pending":
            self.phase = "running"
        return [self._end("ABORT")]

    def not_installed(self) -> list[KeyMove]:
        """Moves not (yet) reported installed: those of steps sent and missing, and of steps not sent."""
        done = set()
        for i, epoch in self.epochs.items():
            done.update(m.key for m in self.steps[i] if self.installed.get(m.key, -1) >= epoch)
        return [m for m in self.moves if m.key not in done]

    def _missing(self, index: int) -> tuple[str, ...]:
        epoch = self.epochs.get(index)
        if epoch is None:
            return tuple(m.key for m in self.steps[index])
        return tuple(m.key for m in self.steps[index] if self.installed.get(m.key, -1) < epoch)

    def _issue(self, index: int, now: float) -> list[Action]:
        if index >= len(self.steps):
            return [self._end("DONE" if not self.not_installed() else "ABORT")]
        self.current = index
        self.issued_at = now
        return [SendStep(index, self.steps[index])]

    def _end(self, phase: str) -> Marker:
        self.phase = "done" if phase == "DONE" else "aborted"
        moves = self.moves if phase == "DONE" else self.not_installed()
        return Marker.of(self.migration_id, phase, moves)


def resume_migration(
    events: list[dict[str, Any]], settings: PacingSettings
) -> tuple[Migration, list[int]] | None:
    """The migration a log left in flight (a START with no DONE or ABORT after it), rebuilt: the
    steps the log shows sent, as they were, then the moves not sent yet, split anew. Returns it with
    its sent steps' epochs, or None when nothing is in flight."""
    start = None
    for e in events:
        if e["type"] != "MIGRATION_STEP":
            continue
        body = e["payload"][1]
        if body["phase"] == "START":
            start = (e, body)
        elif (
            start is not None
            and body["migration_id"] == start[1]["migration_id"]
            and body["phase"]
            in (
                "DONE",
                "ABORT",
            )
        ):
            start = None
    if start is None:
        return None
    event, body = start
    mid = body["migration_id"]
    moves = {
        k: KeyMove(k, int(f), int(t))
        for k, f, t in zip(body["keys"], body["from_workers"], body["to_workers"], strict=True)
    }
    sent: list[tuple[tuple[KeyMove, ...], int]] = []
    for e in events:
        if e["epoch"] <= event["epoch"] or e["type"] != "ROUTING_UPDATE":
            continue
        update = e["payload"][1]
        if update.get("migration_id") == mid:
            step = tuple(moves[k] for k in [*update["assign"], *update.get("unassign", [])] if k in moves)
            sent.append((step, int(e["epoch"])))
    done = {m.key for step, _ in sent for m in step}
    rest = [m for k, m in moves.items() if k not in done]
    steps = [step for step, _ in sent] + split_steps(rest, settings)
    migration = Migration(mid, steps, settings.step_timeout_s, settings.on_timeout)
    migration.phase = "running"
    epochs = [epoch for _, epoch in sent]
    if sent:
        migration.current = len(sent) - 1
        migration.epochs = dict(enumerate(epochs))
        migration.issued_at = time.monotonic()
    else:
        migration.current = -1
    return migration, epochs
