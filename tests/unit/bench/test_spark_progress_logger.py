"""The benchmark's progress logger names a class of the Spark installed: log4j takes any logger
name, so a class Spark moved (4.1 moved ``ProgressReporter`` to ``streaming.runtime``) would leave
every contender's progress file empty and the benchmark waiting for batches it never sees."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pyspark
import pytest

from bench.reduce.sparklog import LOGGER

pytestmark = pytest.mark.unit


def test_the_progress_logger_is_a_class_of_the_installed_spark() -> None:
    jars = sorted((Path(pyspark.__file__).parent / "jars").glob("spark-sql_*.jar"))
    assert jars, "pyspark ships no spark-sql jar"
    entry = LOGGER.replace(".", "/") + ".class"
    with zipfile.ZipFile(jars[0]) as jar:
        assert entry in jar.namelist(), f"{LOGGER} is not in {jars[0].name}"
