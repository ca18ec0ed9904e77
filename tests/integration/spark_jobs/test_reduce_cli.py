"""``ballast reduce run`` as a newcomer meets it: a description under ``-h``, a bad processor or
interval refused before any broker is asked, a checkpoint made for another job refused in one line
before Spark starts (exit 2)."""

from __future__ import annotations

import json

from ballast.devstack.processes import free_port
from ballast.kafka.topics import TopicLayout
from tests.integration.ballast.test_cli import ballast, lines_of


def test_help_describes_the_job():
    out = ballast("reduce", "run", "-h").stdout
    assert "Run the stateful reduce" in out and "--processor" in out and "--max-future" in out
    assert "stateful reduce" in ballast("reduce", "-h").stdout


def test_a_bad_processor_is_refused_before_the_broker_is_asked():
    nobody = f"127.0.0.1:{free_port()}"  # nothing listens: the broker check would fail first
    for argv, said in (
        (["--processor", "agregate:size=10s"], "unknown processor 'agregate'"),
        (["--processor", "aggregate:size=ten"], "size"),
        (["--processor", "nobody_here.mod:Thing"], "cannot be imported"),
        (["--max-future", "soon"], "max-future"),
    ):
        done = ballast("reduce", "run", "--bootstrap", nobody, *argv, check=False, timeout=60)
        lines = lines_of(done)
        assert done.returncode == 2, done.stderr
        assert len(lines) == 1 and said in lines[0] and "broker" not in lines[0], lines


def test_a_checkpoint_made_for_another_job_is_refused_in_one_line(bootstrap, admin, unique, tmp_path):
    from ballast.kafka.admin import ensure_topics

    prefix = unique("reduce-cli")
    ensure_topics(admin, TopicLayout(prefix=prefix, workers=4).specs())
    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    made_for = {
        "job": "mine", "routed_topic": f"{prefix}.routed", "routed_partitions": 6,
        "labels": [0, 1, 2, 3, 4, 5], "processor": "aggregate:size=10s",
    }  # fmt: skip
    (checkpoint / "ballast-job.json").write_text(json.dumps(made_for))
    done = ballast(
        "reduce", "run", "--bootstrap", bootstrap, "--prefix", prefix, "--job-id", "mine",
        "--checkpoint", str(checkpoint), check=False, timeout=120,
    )  # fmt: skip
    lines = lines_of(done)
    assert done.returncode == 2, done.stdout + done.stderr
    assert len(lines) == 1 and "was made for routed_partitions 6 (this start: 4)" in lines[0], lines
    assert not (checkpoint / "offsets").exists()  # Spark never started on it
