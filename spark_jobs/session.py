"""A local SparkSession wired for Ballast: Kafka and Avro connector jars, loopback only.

Why a helper: every job and test needs the same four things right — the Maven-resolved connector
jars on ``spark.jars``, ``SPARK_LOCAL_IP=127.0.0.1`` (otherwise Spark binds to the machine's
non-loopback address), Python workers running the virtual environment's interpreter, and a small
fixed number of shuffle partitions (it is frozen into the checkpoint after the first run).
"""

from __future__ import annotations

import os
import sys

from ballast.paths import spark_jars


def local_spark(
    app_name: str = "ballast",
    cores: int = 2,
    shuffle_partitions: int = 8,
    *,
    master: str | None = None,
    log_level: str = "WARN",
    conf: dict[str, str] | None = None,
):
    """Create (or reuse) a SparkSession with Ballast's connectors: ``local[cores]`` unless ``master``
    names another (under spark-submit the master comes from its command line and wins)."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(master or f"local[{cores}]")
        .appName(app_name)
        .config("spark.jars", ",".join(spark_jars()))
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.driver.memory", "1g")
    )
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    return spark
