"""A checkpoint records what it was made for and refuses a start that contradicts it.

Why: Spark freezes the state partition count but knows nothing of Ballast's job id, worker labels
or processor; started against another job's checkpoint, the job would misread state silently.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from spark_jobs.reduce.checkpoint import CheckpointConflict, Manifest, claim, local_folder

pytestmark = pytest.mark.unit

MADE_FOR = Manifest("job-a", "p.routed", 4, (0, 1, 2, 3), "aggregate:size=10s")


def test_the_first_start_writes_the_manifest_and_the_same_start_resumes(tmp_path):
    lock = claim(tmp_path / "cp", MADE_FOR)
    lock.close()
    assert (tmp_path / "cp" / "ballast-job.json").exists()
    claim(tmp_path / "cp", MADE_FOR).close()


@pytest.mark.parametrize(
    "changed, named",
    [
        (Manifest("job-b", "p.routed", 4, (0, 1, 2, 3), "aggregate:size=10s"), "job"),
        (Manifest("job-a", "p.routed", 6, (0, 1, 2, 3, 4, 5), "aggregate:size=10s"), "routed_partitions"),
        (Manifest("job-a", "p.routed", 4, (1, 0, 2, 3), "aggregate:size=10s"), "labels"),
        (Manifest("job-a", "p.routed", 4, (0, 1, 2, 3), "last_values:n=2,size=10s"), "processor"),
    ],
)
def test_a_contradicting_start_is_refused_naming_what_differs(tmp_path, changed, named):
    claim(tmp_path / "cp", MADE_FOR).close()
    with pytest.raises(CheckpointConflict, match=named):
        claim(tmp_path / "cp", changed)


def test_a_checkpoint_in_use_by_another_process_is_refused(tmp_path):
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from spark_jobs.reduce.checkpoint import Manifest, claim; "
            "lock = claim(sys.argv[1], Manifest('job-a', 'p.routed', 4, (0, 1, 2, 3), "
            "'aggregate:size=10s')); "
            "print('held', flush=True); time.sleep(60)",
            str(tmp_path / "cp"),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(CheckpointConflict, match="in use by pid"):
            claim(tmp_path / "cp", MADE_FOR)
    finally:
        holder.kill()
        holder.wait()
    claim(tmp_path / "cp", MADE_FOR).close()  # the lock dies with its holder


def test_a_file_uri_checkpoint_is_guarded_like_its_folder(tmp_path):
    """Spark gets ``file:///…`` as given; the manifest and the lock go in the folder it names
    (before, any ``://`` skipped both, and a second job could share the checkpoint)."""
    uri = f"file://{tmp_path}/cp"
    lock = claim(uri, MADE_FOR)
    try:
        assert lock is not None
        assert json.loads((tmp_path / "cp" / "ballast-job.json").read_text())["job"] == "job-a"
        with pytest.raises(CheckpointConflict, match="job"):
            claim(f"file:{tmp_path}/cp", Manifest("job-b", "p.routed", 4, (0, 1, 2, 3), "aggregate:size=10s"))
    finally:
        lock.close()


@pytest.mark.parametrize(
    "given, folder",
    [
        ("/data/ck", "/data/ck"),
        ("rel/ck", "rel/ck"),
        ("file:///data/ck", "/data/ck"),
        ("file:/data/ck", "/data/ck"),
        ("file://localhost/data/my%20ck", "/data/my ck"),
        ("FILE:///data/ck", "/data/ck"),
        ("file://otherhost/data/ck", None),
        ("s3a://bucket/ck", None),
        ("hdfs:/ck", None),
    ],
)
def test_the_folder_a_checkpoint_names(given, folder):
    found = local_folder(given)
    assert (None if found is None else str(found)) == folder
