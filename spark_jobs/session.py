"""A SparkSession wired for Ballast: Kafka and Avro connector jars, the driver on one address.

Why a helper: every job and test needs the same four things right — the Maven-resolved connector
jars on ``spark.jars``, the driver's one address (``SPARK_LOCAL_IP`` and ``spark.driver.host``:
127.0.0.1 for a local master, otherwise Spark binds to the machine's non-loopback address),
Python workers running the virtual environment's interpreter, and a small fixed number of shuffle
partitions (it is frozen into the checkpoint after the first run).

Under ``spark-submit`` (``reduce submit``) the driver's JVM is already running, started with the
address :mod:`spark_jobs.submit` chose (the route to the master, or ``--driver-host``); the
session then leaves it alone, since a builder option would override spark-submit's and send a
remote cluster's executors to 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ballast.paths import spark_jars
from spark_jobs.addresses import driver_address

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
# the state store every stateful query of Ballast's runs on: the reduce job, and the benchmark's
# Spark-only baseline, which must pay the same state costs to be compared with it
SPARK_CONF = {
    "spark.sql.streaming.stateStore.providerClass": ROCKSDB,
    # a commit writes the batch's changes, not a full RocksDB checkpoint copy, every micro-batch
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    # the Arrow batches of one worker's rows; larger than Spark's 10,000 default for big batches
    "spark.sql.execution.arrow.maxRecordsPerBatch": "100000",
    # Spark's RocksDB store reads a key's old value at every put and merge only to count rows for a
    # metric; for a state entry of a few hundred KB (a window's rows) that read costs as much as the
    # write. Ballast reports its own state size (WorkerStats.state_keys, state_bytes).
    "spark.sql.streaming.stateStore.rocksdb.trackTotalNumberOfRows": "false",
    # Spark 4.x checks an Arrow batch's byte size before every row it writes to
    # transformWithStateInPandas unless this is Int.MaxValue; the size of a list column (the
    # envelope's `values`) is recomputed over the whole batch each time, so the check is quadratic
    # in the batch: 54 % of the job's JVM samples in a profile of 100,000-row batches. Batches stay
    # bounded by maxRecordsPerBatch above.
    "spark.sql.execution.arrow.maxBytesPerBatch": "2147483647",
    # Spark 4.2's "types framework" flag defaults to a function reading the SPARK_TESTING
    # environment variable, and from_avro asks for it for every field of every decoded row (a new
    # SpecificInternalRow each): about a third of the JVM samples of the benchmark's from_avro
    # prototype. Set, it is a lookup.
    "spark.sql.types.framework.enabled": "false",
}


# attempts of a task in local mode (Spark's ``local[N, F]``; plain ``local[N]`` tries once). Why:
# a task can fail for a reason of the moment (a Python worker that did not connect back within
# Spark's 10 s on a loaded machine, seen in the fault campaign), and in local mode that failed
# the query, so the reduce exited and restarted on its checkpoint. A retried task re-reads the
# same offsets and state version: what it writes is what its first attempt would have (a replay)
LOCAL_TASK_ATTEMPTS = 4


def local_spark(
    app_name: str = "ballast",
    cores: int = 2,
    shuffle_partitions: int = 8,
    *,
    master: str | None = None,
    log_level: str = "WARN",
    conf: dict[str, str] | None = None,
    output: str | Path | None = None,
):
    """Create (or reuse) a SparkSession with Ballast's connectors: ``local[cores]`` (each task tried
    up to :data:`LOCAL_TASK_ATTEMPTS` times) unless ``master`` names another (under spark-submit
    the master comes from its command line and wins).

    ``output``: a file for everything the Spark JVM prints (its log lines, start-up notices, the
    prints of the Python workers it starts) instead of this process's terminal. It applies only
    when this call starts the JVM (the first session of the process).

    The JVM this call starts runs in a session of its own: a SIGTERM to this process's group (what
    a supervisor or a terminal sends) reaches the Python driver only, which stops its query and
    then Spark, instead of killing the JVM under it mid-batch. The JVM still ends with the driver:
    it exits when its stdin pipe from this process closes, however the process died.
    """
    options = {
        "spark.master": master or f"local[{cores},{LOCAL_TASK_ATTEMPTS}]",
        "spark.app.name": app_name,
        "spark.jars": ",".join(spark_jars()),
        **driver_options(master, conf or {}),
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": str(shuffle_partitions),
        "spark.driver.memory": "1g",
        **(conf or {}),
    }
    if "spark.driver.bindAddress" in options:
        os.environ.setdefault("SPARK_LOCAL_IP", options["spark.driver.bindAddress"])
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway
    from pyspark.sql import SparkSession

    if SparkContext._gateway is None and "PYSPARK_GATEWAY_PORT" not in os.environ:
        # what SparkContext would do on first use, with the JVM in a session of its own and its
        # stdout and stderr sent to a file when asked; the options go to spark-submit as well, so
        # the JVM starts with its driver memory
        popen: dict[str, Any] = {"start_new_session": True}
        with contextlib.ExitStack() as files:
            if output is not None:
                popen["stdout"] = files.enter_context(open(output, "ab"))
                popen["stderr"] = subprocess.STDOUT
            gateway = launch_gateway(SparkConf(loadDefaults=False).setAll(options.items()), popen)
        SparkContext._ensure_initialized(gateway=gateway)
    builder = SparkSession.builder
    for key, value in options.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    return spark


def driver_options(
    master: str | None, conf: Mapping[str, str], environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """``spark.driver.host`` and ``bindAddress`` for a driver this process starts; none under
    spark-submit (``PYSPARK_GATEWAY_PORT`` set: its JVM runs with the submit's address) or when
    ``conf`` names the host. A local master: 127.0.0.1; a ``spark://`` one: this host's address on
    the route to it (:func:`spark_jobs.addresses.driver_address`)."""
    environ = os.environ if environ is None else environ
    if "PYSPARK_GATEWAY_PORT" in environ or "spark.driver.host" in conf:
        return {}
    host = driver_address(master or "local")
    return {"spark.driver.host": host, "spark.driver.bindAddress": host}
