"""What a reduce worker keeps between micro-batches besides its rows: its meta, typed and versioned.

Why typed and versioned: the meta is written into Spark's state store with every batch and read
back by the next one, possibly by a later Ballast after an upgrade. As an untyped dict, any change
to it silently reinterpreted every user's checkpoint. Here the layout is written down once, every
blob carries the version of the layout it was written in, and :func:`load` reads every version so
far into the one in-memory form (:class:`WorkerMeta`); a blob of a version this Ballast does not
know is refused (:class:`MetaVersionError`) rather than misread.

Versions (docs/reduce.md, "The worker's meta"):

* **1** — the layout before versioning: no ``version`` key. Keys written by older engines are
  read as they were then: one missing takes its default (the engine filled them in), ``timer``
  (written while the job kept an event-time timer) is dropped; any other key is ignored.
* **2** — the same keys, the same shapes, and ``"version": 2``. A shed span's ends are written as
  integers (version 1 wrote them as floats, always whole). Read strictly: a key missing or
  unknown is an error (only this code writes version 2).

A later change adds version 3: the dataclasses change, :func:`_encode` writes the new layout,
:data:`VERSION` becomes 3, a strict ``_read_v3`` reads it, and ``_read_v2`` (like ``_read_v1``)
turns a version-2 blob into the new form; :data:`READERS` maps each version to its reader.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

VERSION = 2  # the layout dump() writes


class MetaVersionError(ValueError):
    """A meta blob this Ballast cannot read: a newer layout, or not a meta at all."""


@dataclass(frozen=True, slots=True)
class Bucket:
    """One stored bucket (window start), as the step left it: when it next needs a look."""

    due: int  # its earliest row due for emission (batch.NEVER: none)
    expire: int  # the earliest a row of it may be dropped past the horizon (batch.NEVER: none)
    rows: int
    stored_bytes: int  # its encoded size in the store


@dataclass(slots=True)
class PendingRun:
    """A run of a key that waits here for its state chunk (from the previous owner)."""

    ship_at: int = -1  # its key moved on at this epoch before the chunk came: ship it then (-1: no)
    ship_to: int = -1  # to this worker
    held: int = 0  # records of the run held here until the chunk comes (non-mergeable processors)
    pieces: dict[int, list[int]] = field(default_factory=dict)  # chunk count -> indices arrived


@dataclass(slots=True)
class RehashReceipt:
    """One rehash (``SCALE``) epoch, as its receiver: what has come while its senders still ship."""

    done: list[int] = field(default_factory=list)  # senders that announced "shipment done"
    installed: list[str] = field(default_factory=list)  # keys whose chunk was installed


@dataclass(frozen=True, slots=True)
class PartitionClock:
    """One input partition's event-time progress (spark_jobs.reduce.event_time)."""

    progress: int  # the highest event time announced (-1: none yet)
    advanced_at: int  # routed-log time it last advanced, or was first seen (-1: not yet)
    legacy: bool  # followed by its records: its router's markers carry no progress


@dataclass(slots=True)
class ClockState:
    """The :class:`~spark_jobs.reduce.event_time.EventClock`'s state."""

    log_ms: int = -1  # the highest routed-log time read so far (-1: none)
    parts: dict[str, PartitionClock] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ShedSpan:
    """Event times [first, last] (ms) a router shed records of, under keep-probability ``keep``."""

    first: int
    last: int
    keep: float


@dataclass(slots=True)
class WorkerMeta:
    """Everything a worker keeps between steps besides its rows (engine: what each is for)."""

    seen: dict[str, int] = field(default_factory=dict)  # input partition -> highest marker epoch here
    inputs: list[str] = field(default_factory=list)  # input partitions found besides the configured
    known: int = 0  # the highest epoch seen in this partition
    log_epoch: int = 0  # the control log's end as the batches so far read it (CONTROL rows)
    shipped: int = 0  # moves of every epoch up to this one have been shipped (or are owed)
    buckets: dict[int, Bucket] = field(default_factory=dict)  # window start -> its bucket
    pending: dict[str, dict[int, PendingRun]] = field(default_factory=dict)  # key -> run -> waiting
    rehash: dict[int, RehashReceipt] = field(default_factory=dict)  # open rehash epochs (receiver)
    closed: list[int] = field(default_factory=list)  # rehash epochs every sender announced done
    owed_done: list[int] = field(default_factory=list)  # rehash epochs whose "done" is still owed
    steps: int = 0
    watermark: int = 0  # this worker's event time
    event: ClockState = field(default_factory=ClockState)
    shed: list[ShedSpan] = field(default_factory=list)  # shed spans reported to this worker

    def pending_run(self, key: str, run: int) -> PendingRun | None:
        return self.pending.get(key, {}).get(run)

    def await_run(self, key: str, run: int) -> PendingRun:
        """The pending run (key, run), registered if it is not yet."""
        return self.pending.setdefault(key, {}).setdefault(run, PendingRun())

    def receipt(self, epoch: int) -> RehashReceipt:
        """Rehash epoch ``epoch``'s receipt, opened if it is not yet."""
        return self.rehash.setdefault(epoch, RehashReceipt())


# --- the codec ------------------------------------------------------------------------------------


def dump(meta: WorkerMeta) -> bytes:
    """``meta`` in the current layout (:data:`VERSION`)."""
    return json.dumps({**_encode(meta), "version": VERSION}, sort_keys=True).encode()


def load(blob: bytes | None) -> WorkerMeta | None:
    """A blob of any version so far (None or empty: a worker that has no meta yet)."""
    if not blob:
        return None
    try:
        raw = json.loads(blob)
    except ValueError as e:
        raise MetaVersionError(f"the worker's meta is not JSON ({e}): the checkpoint is damaged") from e
    if not isinstance(raw, dict):
        raise MetaVersionError(f"the worker's meta is a JSON {type(raw).__name__}, not an object")
    version = raw.pop("version", 1)
    reader = READERS.get(version) if isinstance(version, int) and not isinstance(version, bool) else None
    if reader is None:
        if isinstance(version, int) and version > VERSION:
            raise MetaVersionError(
                f"the worker's meta is of version {version}, written by a newer Ballast; this one reads "
                f"versions 1 to {VERSION}. Run the Ballast that wrote this checkpoint (or a later one)"
            )
        raise MetaVersionError(f"the worker's meta has version {version!r}, which no Ballast writes")
    return reader(raw)


def _encode(meta: WorkerMeta) -> dict[str, Any]:
    return {
        "seen": dict(meta.seen),
        "inputs": list(meta.inputs),
        "known": meta.known,
        "log_epoch": meta.log_epoch,
        "shipped": meta.shipped,
        "buckets": {str(b): [x.due, x.expire, x.rows, x.stored_bytes] for b, x in meta.buckets.items()},
        "pending": {
            key: {
                str(run): {
                    "ship_at": p.ship_at,
                    "ship_to": p.ship_to,
                    "held": p.held,
                    "counts": {str(count): list(got) for count, got in p.pieces.items()},
                }
                for run, p in runs.items()
            }
            for key, runs in meta.pending.items()
        },
        "rehash": {
            str(epoch): {"done": list(r.done), "installed": list(r.installed)}
            for epoch, r in meta.rehash.items()
        },
        "closed": list(meta.closed),
        "owed_done": list(meta.owed_done),
        "steps": meta.steps,
        "watermark": meta.watermark,
        "event": {
            "log": meta.event.log_ms,
            "parts": {pid: [p.progress, p.advanced_at, p.legacy] for pid, p in meta.event.parts.items()},
        },
        "shed": [[s.first, s.last, s.keep] for s in meta.shed],
    }


def _decode(raw: dict[str, Any]) -> WorkerMeta:
    """The fields of versions 1 and 2 (the same shapes); dict order is kept as the blob has it."""
    event = raw["event"]
    parts = event.get("parts", {})
    return WorkerMeta(
        seen={str(p): int(e) for p, e in raw["seen"].items()},
        inputs=[str(p) for p in raw["inputs"]],
        known=int(raw["known"]),
        log_epoch=int(raw["log_epoch"]),
        shipped=int(raw["shipped"]),
        buckets={int(b): Bucket(*(int(x) for x in v)) for b, v in raw["buckets"].items()},
        pending={
            str(key): {
                int(run): PendingRun(
                    ship_at=int(p["ship_at"]),
                    ship_to=int(p["ship_to"]),
                    held=int(p["held"]),
                    pieces={int(c): [int(i) for i in got] for c, got in p["counts"].items()},
                )
                for run, p in runs.items()
            }
            for key, runs in raw["pending"].items()
        },
        rehash={
            int(e): RehashReceipt([int(s) for s in r["done"]], [str(k) for k in r["installed"]])
            for e, r in raw["rehash"].items()
        },
        closed=[int(e) for e in raw["closed"]],
        owed_done=[int(e) for e in raw["owed_done"]],
        steps=int(raw["steps"]),
        watermark=int(raw["watermark"]),
        event=ClockState(
            int(event.get("log", -1)),
            {str(pid): PartitionClock(int(p[0]), int(p[1]), bool(p[2])) for pid, p in parts.items()},
        ),
        shed=[ShedSpan(int(a), int(b), float(k)) for a, b, k in raw["shed"]],
    )


_KEYS = frozenset(_encode(WorkerMeta()))
_V1_DEFAULTS = _encode(WorkerMeta()) | {"event": {}}  # what the engine filled a missing key with


def _read_v1(raw: dict[str, Any]) -> WorkerMeta:
    """Keys of older engines (``timer``: the event-time timer's due time) were never read again."""
    fields = {k: v for k, v in raw.items() if k in _KEYS}
    return _decode({**_V1_DEFAULTS, **fields})


def _read_v2(raw: dict[str, Any]) -> WorkerMeta:
    missing, unknown = _KEYS - set(raw), set(raw) - _KEYS
    if missing or unknown:
        raise MetaVersionError(
            f"the worker's meta (version 2) lacks {sorted(missing)} and has unknown {sorted(unknown)}: "
            "the checkpoint is damaged"
        )
    return _decode(raw)


READERS: dict[int, Callable[[dict[str, Any]], WorkerMeta]] = {1: _read_v1, 2: _read_v2}
