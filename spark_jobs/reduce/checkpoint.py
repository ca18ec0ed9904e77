"""What a checkpoint was made for, and who uses it now: a manifest and a lock beside Spark's files.

Why: Spark freezes the number of state partitions into a checkpoint, and Ballast adds more that a
later start must not contradict: the job id its chunks carry, the worker labels that put routed
partition w's state in state partition w, the processor whose state the store holds. Started
against a checkpoint made for something else, the job would misplace or misread its state without
a word. So the first start writes ``ballast-job.json`` and every later start compares; a
contradiction is refused in one line (exit 2). And a lock file keeps two jobs from running on one
checkpoint at once (they would apply each other's chunks and interleave commits).

A checkpoint on a remote filesystem (a URL: ``s3a://``, ``hdfs://``) is not checked here: Spark
reads it through Hadoop, and so would this check have to.
"""

from __future__ import annotations

import fcntl
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO

from ballast.cli.console import UsageError

MANIFEST = "ballast-job.json"
LOCK = "ballast-job.lock"


class CheckpointConflict(UsageError):
    """The checkpoint was made for another job, worker layout or processor, or is in use."""


@dataclass(frozen=True)
class Manifest:
    job: str
    routed_topic: str
    routed_partitions: int
    labels: tuple[int, ...]
    processor: str

    def differences(self, other: Manifest, ignore: tuple[str, ...] = ()) -> list[str]:
        mine, theirs = asdict(self), asdict(other)
        return [
            f"{k} {theirs[k]!r} (this start: {mine[k]!r})"
            for k in mine
            if k not in ignore and mine[k] != theirs[k]
        ]


def _local(checkpoint: str | Path) -> Path | None:
    text = str(checkpoint)
    return None if "://" in text else Path(text)


def recorded(checkpoint: str | Path) -> Manifest | None:
    """The manifest a checkpoint was made with (None: a new or remote checkpoint)."""
    folder = _local(checkpoint)
    if folder is None or not (folder / MANIFEST).exists():
        return None
    raw = json.loads((folder / MANIFEST).read_text())
    return Manifest(**{**raw, "labels": tuple(raw["labels"])})


def check(checkpoint: str | Path, manifest: Manifest, ignore: tuple[str, ...] = ()) -> None:
    """Refuse (:class:`CheckpointConflict`) a start that contradicts the checkpoint's manifest.

    Why apart from :func:`claim`: the job compares what it knows before Spark starts (job id,
    topic, worker count, processor: ``ignore=("labels",)``) so a wrong start fails in a second,
    not after Spark's start-up; the labels need Spark and are compared by the claim."""
    made_for = recorded(checkpoint)
    if made_for is None:
        return
    differences = manifest.differences(made_for, ignore)
    if differences:
        raise CheckpointConflict(
            f"checkpoint {checkpoint} was made for {'; '.join(differences)}: resume it with the same "
            "settings, or start with another --checkpoint (and --job-id)"
        )


def claim(checkpoint: str | Path, manifest: Manifest) -> IO[str] | None:
    """Lock ``checkpoint`` for this process and check (or write) its manifest.

    Returns the open lock file: the lock holds while it stays open (the job's lifetime). Raises
    :class:`CheckpointConflict` when another process holds it or the manifest contradicts.
    """
    folder = _local(checkpoint)
    if folder is None:
        return None
    folder.mkdir(parents=True, exist_ok=True)
    lock = open(folder / LOCK, "a+")  # noqa: SIM115 - held open for the job's life
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.seek(0)
        holder = lock.read().strip() or "another process"
        lock.close()
        raise CheckpointConflict(
            f"checkpoint {folder} is in use by {holder}: one job per checkpoint (stop it, or give this one "
            "another --checkpoint and --job-id)"
        ) from None
    lock.seek(0)
    lock.truncate()
    lock.write(f"pid {os.getpid()} (job {manifest.job})\n")
    lock.flush()
    try:
        check(folder, manifest)
    except CheckpointConflict:
        lock.close()
        raise
    if recorded(folder) is None:
        (folder / MANIFEST).write_text(json.dumps(asdict(manifest), indent=2) + "\n")
    return lock
