"""The partition stage's local store: one pickled :class:`PartitionState` file per routed partition.

Why a whole-file pickle and not a key-value store: a partition holds a few thousand open windows
(keys x windows not yet closed), so rewriting all of it per batch costs about a millisecond and
needs no library; the write is atomic (a temporary file, ``fsync`` left to the OS, then
``os.replace``), so a crash leaves the previous batch's state, and the batch id in it turns a
replay into a no-op (:func:`bench.reduce.partition_fold.fold`).

In exactly-once mode the file also records the changelog's end just past its own commit and the
producer that made it (:class:`Stored`): the file is then only a cache of the changelog, trusted
when both still match (:mod:`bench.reduce.partition_exactly_once`).

The in-process cache: Spark reuses its Python workers, so the state a worker wrote last batch is
usually still in its memory. But any of the ``local[cores]`` workers may get a partition's task,
so the cache is trusted only when the file is the very one this process wrote (same inode and
modification time); otherwise the file is read.
"""

from __future__ import annotations

import os
import pickle
from dataclasses import dataclass
from pathlib import Path

from bench.reduce.partition_fold import PartitionState


@dataclass(frozen=True)
class Stored:
    """A saved state, and where the changelog stood when it was saved (exactly-once mode): the
    offset just past the saving task's commit, and which producer committed it."""

    state: PartitionState
    changelog_end: int = -1  # -1: not known (the at-least-once stage does not track it)
    writer: str = ""


_CACHE: dict[str, tuple[tuple[int, int, int], Stored]] = {}
READS = {"cache": 0, "file": 0}  # how this process's loads were answered (the stage reports them)


def path_of(state_dir: str, partition: int) -> Path:
    return Path(state_dir) / f"partition-{partition}.pkl"


def _signature(path: Path) -> tuple[int, int, int] | None:
    try:
        s = os.stat(path)
    except FileNotFoundError:
        return None
    return (s.st_ino, s.st_mtime_ns, s.st_size)


def load_stored(state_dir: str, partition: int) -> Stored | None:
    """The partition's last saved state with its changelog position (None if none was saved)."""
    path = path_of(state_dir, partition)
    sig = _signature(path)
    if sig is None:
        return None
    cached = _CACHE.get(str(path))
    if cached is not None and cached[0] == sig:
        READS["cache"] += 1
        return cached[1]
    READS["file"] += 1
    with open(path, "rb") as f:
        stored = pickle.load(f)
    _CACHE[str(path)] = (sig, stored)
    return stored


def load(state_dir: str, partition: int) -> PartitionState:
    """The partition's last saved state (a new one if none was saved)."""
    stored = load_stored(state_dir, partition)
    return PartitionState() if stored is None else stored.state


def save(
    state_dir: str, partition: int, state: PartitionState, changelog_end: int = -1, writer: str = ""
) -> None:
    """Replace the partition's state file atomically, and keep the state in this process."""
    path = path_of(state_dir, partition)
    path.parent.mkdir(parents=True, exist_ok=True)
    stored = Stored(state, changelog_end, writer)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    with open(tmp, "wb") as f:
        pickle.dump(stored, f, protocol=pickle.HIGHEST_PROTOCOL)
    os.replace(tmp, path)
    sig = _signature(path)
    if sig is not None:
        _CACHE[str(path)] = (sig, stored)
