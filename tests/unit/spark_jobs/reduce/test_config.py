"""The reduce job's ``--spark-conf``: pairs reach the session as options, a malformed pair is a user error.

Why a test: the job builds its own SparkSession, so this setting is the only way a Spark option
that is not a setting (the benchmark's ``noDataMicroBatches``) reaches it; a silently dropped or
split pair would change what runs without a word.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from ballast.settings import SettingsError
from spark_jobs.reduce.config import ReduceSettings

pytestmark = pytest.mark.unit


def _parse(*argv: str) -> ReduceSettings:
    parser = argparse.ArgumentParser()
    ReduceSettings.add_arguments(parser)
    return ReduceSettings.from_args(parser.parse_args(list(argv)), env={})


def test_pairs_become_options_and_the_last_of_a_key_wins():
    settings = _parse("--spark-conf", "spark.a=1, spark.b = x=y ,spark.a=2")
    assert settings.spark_options() == {"spark.a": "2", "spark.b": "x=y"}
    assert ReduceSettings().spark_options() == {}


def test_the_environment_and_to_argv_give_the_same_pairs_back():
    env = {"BALLAST_REDUCE_SPARK_CONF": "spark.sql.streaming.noDataMicroBatches.enabled=false"}
    settings = ReduceSettings.from_args(None, env=env)
    assert settings.spark_options() == {"spark.sql.streaming.noDataMicroBatches.enabled": "false"}
    assert _parse(*settings.to_argv()) == settings


@pytest.mark.parametrize("bad", ["spark.a", "=1"])
def test_a_pair_without_a_key_or_an_equals_sign_is_refused(bad):
    with pytest.raises(SettingsError, match="KEY=VALUE"):
        _parse("--spark-conf", bad)


def test_the_default_job_id_and_checkpoint_differ_by_deployment_and_processor(tmp_path):
    one = ReduceSettings()
    other = ReduceSettings(processor="last_values:n=3,size=10s")
    assert one.resolved_job_id("p") != one.resolved_job_id("q")
    assert one.resolved_job_id("p") != other.resolved_job_id("p")
    assert one.resolved_job_id("p").startswith("p-aggregate-")
    assert (
        one.resolved_checkpoint("p", tmp_path) == f"{tmp_path}/reduce/{one.resolved_job_id('p')}/checkpoint"
    )
    given = ReduceSettings(job_id="mine", checkpoint=str(tmp_path / "cp"))
    assert (given.resolved_job_id("p"), given.resolved_checkpoint("p", tmp_path)) == (
        "mine",
        str(tmp_path / "cp"),
    )


@pytest.mark.parametrize(
    "uri", ["file:///data/ck", "file:/data/ck", "file://localhost/data/ck", "ck", "/data/ck"]
)
def test_a_checkpoint_uri_or_path_reaches_spark_exactly_as_given(uri):
    """The setting is Spark's string, not a Path: ``file:///data/ck`` as a Path was ``file:/data/ck``
    (and ``s3a://b/ck`` was ``s3a:/b/ck``, a different URI to Hadoop)."""
    for settings in (
        _parse("--checkpoint", uri),
        ReduceSettings.from_args(None, env={"BALLAST_REDUCE_CHECKPOINT": uri}),
    ):
        assert settings.checkpoint == uri
        assert settings.resolved_checkpoint("p", Path("/state")) == uri
        assert _parse(*settings.to_argv()).checkpoint == uri  # as `reduce submit` hands it to the driver


@pytest.mark.parametrize(
    "uri", ["s3a://bucket/ck", "hdfs://namenode:8020/ck", "gs://b/ck", "file://otherhost/ck"]
)
def test_a_checkpoint_on_another_file_system_is_refused_saying_why(uri):
    with pytest.raises(SettingsError, match=r"--checkpoint: .*only a plain path or a file: URI.*POSIX lock"):
        _parse("--checkpoint", uri)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--processor", "no_such_processor"], "processor"),
        (["--processor", "aggregate:size=ten"], "size"),
        (["--max-future", "soon"], "interval"),
        (["--idle-timeout", "a while"], "interval"),
        (["--correction-horizon", "-1 seconds"], "interval"),
    ],
)
def test_a_bad_processor_or_interval_is_refused_at_parse_time(argv, message):
    with pytest.raises((SettingsError, ValueError), match=message):
        _parse(*argv)


def test_horizon_defaults_to_the_watermark_delay():
    assert ReduceSettings(watermark_delay="7 seconds").horizon_ms() == 7000
    assert ReduceSettings(correction_horizon="1 minute").horizon_ms() == 60000


def test_the_idle_timeout_and_the_watermark_delay_reach_the_workers():
    """The idle timeout defaults to a minute (longer than a router's session and transaction
    timeouts, so a dead router's partitions are handed over before they count as idle), takes an
    interval from a flag or the environment, and travels in the job spec with the delay."""
    assert ReduceSettings().idle_timeout_ms() == 60_000
    assert _parse("--idle-timeout", "30 seconds").idle_timeout_ms() == 30_000
    env = {"BALLAST_REDUCE_IDLE_TIMEOUT": "2 minutes", "BALLAST_REDUCE_WATERMARK_DELAY": "3 seconds"}
    settings = ReduceSettings.from_args(None, env=env)
    assert (settings.idle_timeout_ms(), settings.watermark_delay_ms()) == (120_000, 3_000)
    assert _parse("--idle-timeout", "0 seconds").idle_timeout_ms() == 0  # never idle


def test_input_topics_come_from_a_flag_or_the_environment_and_travel_to_a_submitted_driver():
    assert _parse().input_topics == ()  # the layout's <prefix>.input, chosen by job_spec
    assert _parse("--input-topics", "orders, clicks").input_topics == ("orders", "clicks")
    env = ReduceSettings.from_args(None, env={"BALLAST_REDUCE_INPUT_TOPICS": "orders,clicks"})
    assert env.input_topics == ("orders", "clicks")
    assert _parse(*env.to_argv()) == env  # `reduce submit` passes the resolved settings as flags
