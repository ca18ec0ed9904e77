"""Submitting a PySpark application to a Spark master with ``spark-submit``, here or on other hosts.

Why ``spark-submit`` and not a SparkSession built in this process: a cluster job's driver must be
its own process — a job that runs for hours cannot share a JVM with the command that started it,
and only ``spark-submit`` puts the connector jars, the Python interpreter and the driver's
addresses in place before the JVM starts. Why pure functions for the command line: the argv is
where every "why does it bind to the wrong address / run the wrong Python" lives, so it is built
in one place and unit-tested without a cluster (:func:`submit_command`); :func:`run_submit` only
runs it, and :func:`submit_app` builds the code archive, the command, and runs it.

What the command always carries, and why:

- ``--deploy-mode client``: the driver runs here, in spark-submit's process. Spark's standalone
  master refuses cluster deploy mode for Python applications ("Cluster deploy mode is currently
  not supported for python applications on standalone clusters", SparkSubmit), so client mode is
  the only one, and saying so keeps a ``spark.submit.deployMode`` from elsewhere out.
- ``--jars``: the Maven-resolved Kafka and Avro connectors (:func:`ballast.paths.spark_jars`);
  pyspark ships neither. The driver serves them to the executors.
- ``spark.pyspark.driver.python``: this interpreter (the driver runs here). ``spark.pyspark.python``:
  the executors' interpreter, ``--python`` — a path that exists on every worker, in an environment
  with Ballast's dependencies (pandas, pyarrow, numpy, avro…); by default this interpreter, which
  is right when the workers run on this machine.
- ``--archives <zip>#ballast-code`` and ``spark.executorEnv.PYTHONPATH=ballast-code``: Ballast's own
  code, packed at submit time (:mod:`spark_jobs.shipping`), so workers need no checkout.
- ``spark.driver.host`` / ``spark.driver.bindAddress`` and ``SPARK_LOCAL_IP`` in the environment:
  the one address the driver binds and advertises, which the executors must reach. ``--driver-host``
  when given, else this host's address on the route to the master (:func:`driver_address`), which
  is 127.0.0.1 exactly when the master is on loopback. Without them Spark would advertise whatever
  the machine's host name resolves to.
- ``spark.ui.enabled=false``: the driver's web UI would be one more listening port nobody reads.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from ballast.cli.console import EnvironmentProblem
from ballast.devstack.state import StackError, StackState
from ballast.paths import spark_home as installed_spark_home
from ballast.paths import spark_jars
from ballast.settings import Settings, setting
from spark_jobs.addresses import LOOPBACK, driver_address
from spark_jobs.shipping import UNPACKED, build_code_archive


class SubmitError(EnvironmentProblem):
    """``spark-submit`` could not be run, or did not finish in time; the message names the log."""


@dataclass(frozen=True)
class SubmitSettings(Settings):
    """Where ``spark-submit`` sends an application and what it asks of the cluster."""

    ENV_PREFIX: ClassVar[str] = "BALLAST_SPARK_"

    master: str = setting(
        "", "Spark master URL, spark://HOST:PORT (none: the local stack's cluster in --state-dir)"
    )
    driver_host: str = setting(
        "",
        "the address the driver binds and advertises to the executors, which must reach it (none: "
        "this host's address on its route to the master; 127.0.0.1 when the master is on loopback)",
    )
    python: str = setting(
        "",
        "the Python interpreter of the executors: a path present on every worker, in an environment "
        "with Ballast's dependencies installed (none: this interpreter, right for workers on this machine)",
    )
    ship_code: bool = setting(
        True,
        "pack Ballast's own code (ballast, services, spark_jobs, schemas) at submit time and send it "
        "to the executors (spark-submit --archives), so workers need no checkout",
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
    driver_host: str | None = None,
    code: str | Path | None = None,
) -> list[str]:
    """The ``spark-submit`` argv that runs ``app`` (a .py file) with ``app_args`` on ``master``.

    ``conf`` adds properties or replaces Ballast's own (still one ``--conf`` per key). ``jars``,
    ``python`` (the driver's, and the executors' unless ``settings.python`` names theirs) and
    ``spark_home`` default to the connectors in the jar cache, this interpreter and the installed
    pyspark folder. The driver's address is ``driver_host``, else ``settings.driver_host``, else
    found from the route to the master. ``code``: the archive of Ballast's code
    (:func:`spark_jobs.shipping.build_code_archive`) the executors get. Pass all of them to build
    the command without touching the filesystem or the network.
    """
    settings = settings or SubmitSettings()
    home = Path(spark_home) if spark_home is not None else installed_spark_home()
    jars = spark_jars() if jars is None else list(jars)
    python = python or sys.executable
    host = driver_host or settings.driver_host or driver_address(master)
    cmd = [str(home / "bin" / "spark-submit"), "--master", master, "--deploy-mode", "client"]
    if jars:
        cmd += ["--jars", ",".join(jars)]
    properties = {
        "spark.pyspark.python": settings.python or python,
        "spark.pyspark.driver.python": python,
        "spark.driver.host": host,
        "spark.driver.bindAddress": host,
        "spark.ui.enabled": "false",
    }
    if code is not None:
        # unpacked into each executor's working folder, where its Python workers start
        properties["spark.executorEnv.PYTHONPATH"] = UNPACKED
    properties.update(conf or {})
    for key, value in properties.items():
        cmd += ["--conf", f"{key}={value}"]
    if settings.total_executor_cores:
        cmd += ["--total-executor-cores", str(settings.total_executor_cores)]
    if settings.executor_memory:
        cmd += ["--executor-memory", settings.executor_memory]
    if settings.py_files:
        cmd += ["--py-files", settings.py_files]
    if code is not None:
        cmd += ["--archives", f"{code}#{UNPACKED}"]
    return [*cmd, str(app), *app_args]


def _conf(command: Sequence[str], key: str) -> str | None:
    """The value ``command`` gives Spark property ``key`` (its last ``--conf``), or None."""
    found = None
    for flag, value in itertools.pairwise(command):
        if flag == "--conf" and value.startswith(f"{key}="):
            found = value.split("=", 1)[1]
    return found


def submit_env(
    command: Sequence[str], base: Mapping[str, str] | None = None, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment ``command`` runs in: ``base`` (this process's), ``extra`` (secrets the driver
    reads from its environment), plus SPARK_LOCAL_IP and SPARK_HOME.

    SPARK_LOCAL_IP is the address the command binds the driver to (loopback if it names none), so
    whatever in the driver's JVM binds by that variable rather than the properties agrees.
    SPARK_HOME is the folder the command's own ``bin/spark-submit`` lives in: spark-submit takes a
    SPARK_HOME already set in the environment over its own, and another Spark's jars there would
    not match this pyspark.
    """
    env = dict(os.environ if base is None else base)
    env.update(extra or {})
    env["SPARK_LOCAL_IP"] = _conf(command, "spark.driver.bindAddress") or LOOPBACK
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


def submit_app(
    app: str | Path,
    app_args: Sequence[str] = (),
    *,
    master: str,
    settings: SubmitSettings | None = None,
    log: str | Path | None = None,
    timeout: float | None = None,
    env: Mapping[str, str] | None = None,
    conf: Mapping[str, str] | None = None,
) -> int:
    """Submit ``app`` to ``master`` as ``ballast reduce submit`` does and wait for its end: Ballast's
    code packed into a temporary folder (unless ``settings.ship_code`` is off), which lives until
    the application has finished (the driver serves the archive to executors that join late)."""
    settings = settings or SubmitSettings()
    with tempfile.TemporaryDirectory(prefix="ballast-submit-") as folder:
        code = build_code_archive(folder) if settings.ship_code else None
        command = submit_command(app, app_args, master=master, settings=settings, conf=conf, code=code)
        return run_submit(command, log=log, timeout=timeout, env=env)


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
