"""Submitting a PySpark application to a Spark master with ``spark-submit``, loopback only.

Why ``spark-submit`` and not a SparkSession built in this process: a cluster job's driver must be
its own process — a job that runs for hours cannot share a JVM with the command that started it,
and only ``spark-submit`` puts the connector jars, the Python interpreter and the driver's
addresses in place before the JVM starts. Why pure functions for the command line: the argv is
where every "why does it bind to the wrong address / run the wrong Python" lives, so it is built
in one place and unit-tested without a cluster (:func:`submit_command`); :func:`run_submit` only
runs it.

What the command always carries, and why:

- ``--jars``: the Maven-resolved Kafka and Avro connectors (:func:`ballast.paths.spark_jars`);
  pyspark ships neither.
- ``spark.pyspark.python`` / ``spark.pyspark.driver.python``: this virtual environment's
  interpreter, on the driver and on the executors (they import pandas, pyarrow and protobuf).
- ``spark.driver.host`` / ``spark.driver.bindAddress`` = 127.0.0.1 and ``SPARK_LOCAL_IP`` in the
  environment: otherwise the driver binds to, and advertises, the machine's non-loopback address.
- ``spark.ui.enabled=false``: the driver's web UI would be one more listening port nobody reads.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from ballast.devstack.state import StackError, StackState
from ballast.paths import spark_home as installed_spark_home
from ballast.paths import spark_jars
from ballast.settings import Settings, setting

LOOPBACK = "127.0.0.1"


class SubmitError(RuntimeError):
    """``spark-submit`` could not be run, or did not finish in time; the message names the log."""


@dataclass(frozen=True)
class SubmitSettings(Settings):
    """Where ``spark-submit`` sends an application and what it asks of the cluster."""

    ENV_PREFIX: ClassVar[str] = "BALLAST_SPARK_"

    master: str = setting(
        "", "Spark master URL, spark://127.0.0.1:PORT (none: the local stack's cluster in --state-dir)"
    )
    total_executor_cores: int = setting(
        0, "cores the application takes from the cluster in all (0: every core it offers)", minimum=0
    )
    executor_memory: str = setting("1g", "heap of each executor; must fit a worker's --spark-worker-memory")
    py_files: str = setting(
        "",
        "comma-separated .py/.zip files shipped to the executors (spark-submit --py-files): the "
        "package of your own --processor, which this command must be able to import too (PYTHONPATH)",
    )


def submit_command(
    app: str | Path,
    app_args: Sequence[str] = (),
    *,
    master: str,
    settings: SubmitSettings | None = None,
    conf: Mapping[str, str] | None = None,
    jars: Sequence[str] | None = None,
    python: str | None = None,
    spark_home: str | Path | None = None,
) -> list[str]:
    """The ``spark-submit`` argv that runs ``app`` (a .py file) with ``app_args`` on ``master``.

    ``conf`` adds properties or replaces Ballast's own (still one ``--conf`` per key). ``jars``,
    ``python`` and ``spark_home`` default to the connectors in the jar cache, this interpreter and
    the installed pyspark folder; pass them to build the command without touching the filesystem.
    """
    settings = settings or SubmitSettings()
    home = Path(spark_home) if spark_home is not None else installed_spark_home()
    jars = spark_jars() if jars is None else list(jars)
    python = python or sys.executable
    cmd = [str(home / "bin" / "spark-submit"), "--master", master]
    if jars:
        cmd += ["--jars", ",".join(jars)]
    properties = {
        "spark.pyspark.python": python,
        "spark.pyspark.driver.python": python,
        "spark.driver.host": LOOPBACK,
        "spark.driver.bindAddress": LOOPBACK,
        "spark.ui.enabled": "false",
        **(conf or {}),
    }
    for key, value in properties.items():
        cmd += ["--conf", f"{key}={value}"]
    if settings.total_executor_cores:
        cmd += ["--total-executor-cores", str(settings.total_executor_cores)]
    if settings.executor_memory:
        cmd += ["--executor-memory", settings.executor_memory]
    if settings.py_files:
        cmd += ["--py-files", settings.py_files]
    return [*cmd, str(app), *app_args]


def submit_env(
    command: Sequence[str], base: Mapping[str, str] | None = None, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment ``command`` runs in: ``base`` (this process's), ``extra`` (secrets the driver
    reads from its environment), plus loopback and SPARK_HOME.

    SPARK_HOME is the folder the command's own ``bin/spark-submit`` lives in: spark-submit takes a
    SPARK_HOME already set in the environment over its own, and another Spark's jars there would
    not match this pyspark.
    """
    env = dict(os.environ if base is None else base)
    env.update(extra or {})
    env["SPARK_LOCAL_IP"] = LOOPBACK
    env["SPARK_HOME"] = str(Path(command[0]).parent.parent)
    return env


def run_submit(
    command: Sequence[str],
    log: str | Path | None = None,
    timeout: float | None = None,
    cwd: str | Path | None = None,
    env: Mapping[str, str] | None = None,
) -> int:
    """Run ``command`` (from :func:`submit_command`) to its end and return spark-submit's exit code.

    With ``log`` the driver's output (stdout and stderr: Spark's log lines and the application's
    prints) goes to that file, otherwise to this process's. spark-submit runs in its own process
    group, so a time-out, Ctrl-C or SIGTERM here stops the whole driver (the JVM and the Python
    process it starts), not just its first process: SIGTERM goes on to the driver's group, which
    stops its query, and after a grace period SIGKILL.
    """
    with contextlib.ExitStack() as files:
        out = files.enter_context(open(log, "wb")) if log is not None else None
        try:
            proc = subprocess.Popen(
                list(command),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT if out is not None else None,
                env=submit_env(command, extra=env),
                cwd=cwd,
                start_new_session=True,
            )
        except OSError as exc:
            raise SubmitError(f"cannot run {command[0]}: {exc.strerror}") from None
        previous = signal.signal(signal.SIGTERM, _interrupt)
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            where = f"; see {log}" if log is not None else ""
            raise SubmitError(f"spark-submit did not finish within {timeout:g} s{where}") from None
        finally:
            signal.signal(signal.SIGTERM, previous)
            if proc.poll() is None:  # time-out, Ctrl-C or SIGTERM: stop the driver and what it started
                _stop_group(proc)


def _interrupt(signum: int, _frame: object) -> None:
    """SIGTERM while waiting for spark-submit: leave the wait like Ctrl-C, so the driver is stopped."""
    raise KeyboardInterrupt


def _stop_group(proc: subprocess.Popen[bytes]) -> None:
    for sig, grace in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def master_url_from_state(state_dir: str | Path) -> str:
    """The master URL of the Spark cluster recorded in a local stack folder (``stack.json``).

    Reads the record only, so it needs no running process: whether that cluster still runs is the
    caller's to check (:func:`ballast.devstack.spark_cluster.spark_running`, ``ballast stack status``).
    """
    state = StackState.load(state_dir)  # StackError when nothing is recorded there
    if state.spark is None:
        raise StackError(
            f"the stack in {state_dir} has no Spark cluster; start one with `ballast stack up --spark`"
        )
    return state.spark.master_url
