"""What a checkpoint was made for, and who uses it now: a manifest and a lock beside Spark's files.

Why: Spark freezes the number of state partitions into a checkpoint, and Ballast adds more that a
later start must not contradict: the job id its chunks carry, the worker labels that put routed
partition w's state in state partition w, the processor whose state the store holds. Started
against a checkpoint made for something else, the job would misplace or misread its state without
a word. So the first start writes ``ballast-job.json`` and every later start compares; a
contradiction is refused in one line (exit 2). And a lock file keeps two jobs from running on one
checkpoint at once (they would apply each other's chunks and interleave commits).

Where a checkpoint may live: a plain path or a ``file:`` URI, on this machine's file system — on a
cluster of other hosts, a folder every host mounts at the same path (NFS or the like), since the
executors write the state store there too. Spark gets the string exactly as given; the manifest
and the lock use the folder it names. A checkpoint on another Hadoop file system (``hdfs://``,
``s3a://``, ``gs://``…) is refused when the settings are read (:func:`supported`): the lock is a
POSIX ``flock`` that no Hadoop file system offers (S3 has no exclusive create at all, HDFS's
only leases a file it creates), and a checkpoint without it would let two jobs apply each other's
state chunks without a word. docs/reduce.md says what supporting them would take.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO
from urllib.parse import unquote, urlsplit

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


# a URI scheme as Hadoop's Path reads one: letters first, before the first colon, no slash before it
# (two letters at least, so a Windows drive is a path)
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):")


def scheme(checkpoint: str | Path) -> str:
    """The URI scheme of ``checkpoint`` as Spark will read it ("" for a plain path), lower case."""
    found = _SCHEME.match(str(checkpoint))
    return found.group(1).lower() if found else ""


def local_folder(checkpoint: str | Path) -> Path | None:
    """The folder a plain path or a ``file:`` URI names (``file:///x``, ``file:/x``,
    ``file://localhost/x``); None for a checkpoint on another file system."""
    text = str(checkpoint)
    kind = scheme(text)
    if kind == "":
        return Path(text)
    if kind != "file":
        return None
    parts = urlsplit(text)
    if parts.netloc not in ("", "localhost"):
        return None  # file://otherhost/x: not this machine's
    return Path(unquote(parts.path))


def supported(checkpoint: str | Path) -> str:
    """Empty when Ballast can guard ``checkpoint`` (manifest and lock), else why not, in one line."""
    if local_folder(checkpoint) is not None:
        return ""
    return (
        f"{checkpoint}: only a plain path or a file: URI is supported (on a cluster, a folder every "
        f"Spark host mounts at the same path): the checkpoint's one-job lock is a POSIX lock, which "
        f"{scheme(checkpoint) or 'this'}:// does not offer (docs/reduce.md, On a cluster of your own)"
    )


def recorded(checkpoint: str | Path) -> Manifest | None:
    """The manifest a checkpoint was made with (None: a new or remote checkpoint)."""
    folder = local_folder(checkpoint)
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
    folder = local_folder(checkpoint)
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
