"""A Spark standalone cluster (one master, N workers) as plain processes on one host's address.

Why a real cluster beside ``local[N]``: in local mode every task runs inside the driver's JVM, so
what a deployment does differently never happens — tasks in other JVMs (executors) with their own
Python workers, closures and results crossing process boundaries, jars and Python files shipped to
executors. A standalone master with a few small workers exercises those paths on one machine,
and jobs reach it the way they would reach a real one: ``spark-submit --master spark://…``
(:mod:`spark_jobs.submit`).

Why from the pip package: pyspark carries ``bin/spark-class`` and all of Spark's jars
(:func:`ballast.paths.spark_home`), so the master and workers start with nothing else installed.

One address only: unless ``SPARK_LOCAL_IP`` says otherwise, Spark binds its RPC endpoints to the
machine's address and its web UIs to 0.0.0.0. Every daemon therefore runs with ``SPARK_LOCAL_IP``
and ``--host`` set to the cluster's address (127.0.0.1 by default) on ports chosen free there and
recorded; the executors a worker launches inherit its environment, and the REST submission server
(one more port, unused here) is off.

On a host of its own (``host`` and ``namespace``: a network namespace of
:mod:`ballast.devstack.hosts`), every daemon runs inside that namespace and binds and advertises
the host's address, never loopback: a stand-in for a remote cluster. Its executors then get
Ballast's code the way a remote cluster's must, from the application (``spark-submit --py-files``,
:mod:`spark_jobs.submit`), not from this checkout on their ``PYTHONPATH`` as the loopback
cluster's do; the interpreter is still this virtual environment's (``PYSPARK_PYTHON``), which a
namespace on this machine has, as a worker with Ballast's dependencies installed would.

The cluster is part of the stack's state (``"spark"`` in ``stack.json``), so ``ballast stack
status`` shows it and ``ballast stack down`` stops it with the brokers' pid-safety rule: a recorded
pid is signalled only while its command line names the state folder (each daemon's
``--properties-file`` lives there). Its logs and work folders are under ``<state>/spark``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ballast.devstack.processes import (
    Progress,
    Ticker,
    free_ports,
    in_namespace,
    pid_alive,
    quiet,
    stop_pid,
)
from ballast.devstack.state import (
    LOOPBACK,
    SparkMasterState,
    SparkState,
    SparkWorkerState,
    StackError,
    StackState,
)
from ballast.paths import PROJECT_ROOT, spark_home
from ballast.settings import Settings, setting
from ballast.waiting import WaitTimeout, wait_until

SPARK_DIR = "spark"  # under the state folder
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"

# What every daemon reads from its --properties-file (in the state folder, so its command line names
# the folder). The REST submission server would listen on one more port that nothing here uses. A
# port taken meanwhile must fail the start (naming the log), not move the daemon to port+1, where
# the recorded state, and the workers looking for the master, would not find it.
DAEMON_PROPERTIES = {"spark.master.rest.enabled": "false", "spark.port.maxRetries": "0"}


@dataclass(frozen=True)
class SparkSettings(Settings):
    """How the local stack's Spark master and workers run (``ballast stack up --spark``)."""

    spark_worker_cores: int = setting(1, "cores each Spark worker offers to executors", minimum=1)
    spark_worker_memory: str = setting("1g", "memory each Spark worker offers to executors (512m, 2g…)")
    spark_daemon_heap: str = setting(
        "512m", "heap of the Spark master and worker JVMs themselves (executors get their own)"
    )


def workers_text(count: int, noun: str = "worker") -> str:
    """``1 worker``, ``2 workers``: for progress lines and errors."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


# --- planning and launching ------------------------------------------------------------------------


def _plan(
    state_dir: Path, workers: int, settings: SparkSettings, host: str = LOOPBACK, namespace: str = ""
) -> SparkState:
    spark_dir = state_dir / SPARK_DIR
    ports = iter(free_ports(2 + 2 * workers, host, namespace))
    master = SparkMasterState(
        port=next(ports), ui_port=next(ports), log=str(spark_dir / "master.log"), host=host
    )
    planned = []
    for worker_id in range(1, workers + 1):
        worker_dir = spark_dir / f"worker-{worker_id}"
        planned.append(
            SparkWorkerState(
                worker_id=worker_id,
                port=next(ports),
                ui_port=next(ports),
                work_dir=str(worker_dir / "work"),
                log=str(worker_dir / "worker.log"),
                host=host,
            )
        )
    return SparkState(
        master=master,
        workers=planned,
        cores=settings.spark_worker_cores,
        memory=settings.spark_worker_memory,
        properties=str(spark_dir / "conf" / "spark-defaults.conf"),
        namespace=namespace,
    )


def _java_home(java: str) -> str:
    """The JDK folder of ``java``: spark-class takes Java from JAVA_HOME, the stack from --java."""
    found = shutil.which(java)
    if found is None:
        raise StackError(
            f"cannot run java ({java!r}: not found); install a JDK 17+ or set --java / BALLAST_JAVA"
        )
    return str(Path(os.path.realpath(found)).parents[1])


def _daemon_env(spark: SparkState, settings: SparkSettings, java: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        SPARK_HOME=str(spark_home()),
        # our properties file's folder: no spark-env.sh or spark-defaults.conf from elsewhere applies
        SPARK_CONF_DIR=str(Path(spark.properties).parent),
        SPARK_LOCAL_IP=spark.host,
        SPARK_DAEMON_MEMORY=settings.spark_daemon_heap,
        # Python workers on the executors must import what the venv has (pandas, pyarrow, protobuf)
        PYSPARK_PYTHON=sys.executable,
        JAVA_HOME=_java_home(java),
    )
    if not spark.namespace:
        # ...and this checkout's code (ballast, spark_jobs), as the stack's services do: executors
        # inherit the worker's environment, and PySpark's workers keep PYTHONPATH. A cluster on a
        # host of its own stands for a remote one: its code comes with the application (--py-files).
        env["PYTHONPATH"] = os.pathsep.join(
            filter(None, (str(PROJECT_ROOT), os.environ.get("PYTHONPATH", "")))
        )
    return env


def _spawn(
    main: str, args: list[str], log: str, env: dict[str, str], cwd: Path, namespace: str = ""
) -> subprocess.Popen[bytes]:
    cwd.mkdir(parents=True, exist_ok=True)
    cmd = [str(spark_home() / "bin" / "spark-class"), main, *args]
    cmd = in_namespace(namespace, cmd)  # which execs the command: still one pid
    with open(log, "ab") as out:
        # A new session: the cluster outlives `ballast stack up` and ignores the caller's Ctrl-C.
        # spark-class ends in `exec java`, so this pid is the daemon's JVM.
        return subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )


def _start_master(spark: SparkState, env: dict[str, str]) -> subprocess.Popen[bytes]:
    m = spark.master
    args = ["--host", m.host, "--port", str(m.port), "--webui-port", str(m.ui_port)]
    args += ["--properties-file", spark.properties]
    return _spawn(MASTER_CLASS, args, m.log, env, Path(m.log).parent, spark.namespace)


def _start_worker(
    spark: SparkState, worker: SparkWorkerState, env: dict[str, str]
) -> subprocess.Popen[bytes]:
    worker_dir = Path(worker.work_dir).parent
    args = ["--host", worker.host, "--port", str(worker.port), "--webui-port", str(worker.ui_port)]
    args += ["--cores", str(spark.cores), "--memory", spark.memory, "--work-dir", worker.work_dir]
    args += ["--properties-file", spark.properties, spark.master_url]
    # executors' scratch space (shuffle, spilled blocks) in the state folder, not /tmp
    worker_env = {**env, "SPARK_LOCAL_DIRS": str(worker_dir / "local")}
    return _spawn(WORKER_CLASS, args, worker.log, worker_env, worker_dir, spark.namespace)


# --- asking the master ---------------------------------------------------------------------------------


def master_json(ui: str, timeout: float = 2.0) -> dict[str, Any] | None:
    """The master's own view (status, registered workers, apps) from its web UI, or None if no answer."""
    try:
        with urllib.request.urlopen(f"{ui}/json/", timeout=timeout) as resp:
            return json.loads(resp.read())
    except (urllib.error.URLError, OSError, ValueError):
        return None


def _log_tail(log: str, lines: int = 15) -> str:
    """The end of a daemon's log without Java stack frames, which bury the one line that says why."""
    try:
        text = Path(log).read_text(errors="replace").splitlines()[-300:]
    except OSError:
        return "(no log)"
    kept = [line for line in text if not line.lstrip().startswith(("at ", "... "))]
    return "\n".join(kept[-lines:])


def _alive_ports(info: dict[str, Any]) -> set[int]:
    return {int(w["port"]) for w in info.get("workers", ()) if w.get("state") == "ALIVE"}


def _wait(
    spark: SparkState,
    marker: str,
    workers: bool,
    timeout: float,
    progress: Progress,
    children: Mapping[str, subprocess.Popen[bytes]] | None = None,
) -> dict[str, Any]:
    """Until the master says ALIVE and, with ``workers``, every recorded worker registered ALIVE.

    A daemon that exits meanwhile fails the wait at once, naming its log: a worker that cannot start
    (a bad --spark-worker-memory, a taken port) exits within seconds, and waiting out the whole
    timeout would only hide the reason. Daemons the caller has just started are watched through their
    ``children`` handles, not :func:`pid_alive`: a process that is still in its exec shows an empty
    command line for a moment, which the pid rule would take for "not ours".
    """
    children = children or {}

    def exited(name: str, pid: int | None) -> bool:
        if name in children:
            return children[name].poll() is not None
        return pid is not None and not pid_alive(pid, marker)

    want = {w.port for w in spark.workers} if workers else set()
    what = workers_text(len(want), "Spark worker") if workers else f"the Spark master at {spark.master_url}"
    last = ["no answer"]
    progress(f"waiting for {what}…")
    tick = Ticker(f"waiting for {what}", progress)

    def ready() -> dict[str, Any] | None:
        tick()
        for name, pid, log in spark.processes():
            if exited(name, pid):
                raise StackError(f"Spark {name} exited while starting; see {log}:\n{_log_tail(log)}")
        info = master_json(spark.master.ui)
        if info is None:
            last[0] = f"no answer from {spark.master.ui}/json/"
            return None
        alive = _alive_ports(info) & want
        last[0] = f"master {info.get('status')}, {len(alive)} of {len(want)} workers ALIVE"
        return info if info.get("status") == "ALIVE" and alive == want else None

    try:
        return wait_until(ready, timeout, what, interval=0.5, describe=lambda: last[0])
    except WaitTimeout as exc:
        logs = [spark.master.log] + ([w.log for w in spark.workers] if workers else [])
        tails = "\n".join(f"--- {log}\n{_log_tail(log)}" for log in logs)
        raise StackError(f"{exc}; see {', '.join(logs)}\n{tails}") from None


# --- start, stop, status ---------------------------------------------------------------------------------


def spark_running(state: StackState) -> bool:
    """True when the state records a Spark cluster whose master and every worker still run."""
    spark = state.spark
    return spark is not None and all(pid_alive(pid, state.state_dir) for _, pid, _ in spark.processes())


def start_spark(
    state: StackState,
    workers: int = 2,
    settings: SparkSettings | None = None,
    java: str = "java",
    timeout: float = 120.0,
    progress: Progress = quiet,
    host: str = LOOPBACK,
    namespace: str = "",
) -> SparkState:
    """Start a master and ``workers`` workers for ``state`` and wait until all are ALIVE; idempotent.

    A running cluster of the same size and address is reused. One that is partly or wholly stopped
    is stopped and planned anew (fresh free ports): it keeps no data worth a restart in place. If
    start-up fails, the daemons started here are stopped again and the :class:`StackError` names the
    log. ``host`` and ``namespace``: every daemon binds and advertises ``host`` inside network
    ``namespace`` (a host of :mod:`ballast.devstack.hosts`); the defaults are loopback here.
    """
    if workers < 1:
        raise ValueError("a Spark cluster needs at least one worker")
    settings = settings or SparkSettings()
    marker = state.state_dir
    if state.spark is not None and spark_running(state):
        spark = state.spark
        if len(spark.workers) != workers:
            raise StackError(
                f"{marker} runs a Spark cluster with {workers_text(len(spark.workers))}; stop it "
                f"(`ballast stack down`) to start one with {workers}"
            )
        if (spark.host, spark.namespace) != (host, namespace):
            where = f"{spark.host} (namespace {spark.namespace or 'none'})"
            raise StackError(
                f"{marker} runs a Spark cluster on {where}; stop it (`ballast stack down`) to start "
                f"one on {host} (namespace {namespace or 'none'})"
            )
        progress(f"Spark master already running at {spark.master_url} (pid {spark.master.pid})")
        _wait(spark, marker, True, timeout, progress)
        return spark
    if state.spark is not None:
        stop_spark(state)  # what is left of an earlier cluster

    spark = _plan(Path(marker), workers, settings, host, namespace)
    conf = Path(spark.properties)
    conf.parent.mkdir(parents=True, exist_ok=True)
    conf.write_text("".join(f"{k} {v}\n" for k, v in DAEMON_PROPERTIES.items()))
    env = _daemon_env(spark, settings, java)
    state.spark = spark
    state.save()
    children: dict[str, subprocess.Popen[bytes]] = {}
    try:
        progress(f"starting Spark master on {spark.master_url} (web UI {spark.master.ui})…")
        children["master"] = _start_master(spark, env)
        spark.master.pid = children["master"].pid
        state.save()
        _wait(spark, marker, False, timeout, progress, children)
        for w in spark.workers:
            progress(
                f"starting Spark worker {w.worker_id} on {w.address} ({spark.cores} core(s), {spark.memory})…"
            )
            children[f"worker {w.worker_id}"] = _start_worker(spark, w, env)
            w.pid = children[f"worker {w.worker_id}"].pid
        state.save()
        _wait(spark, marker, True, timeout, progress, children)
    except BaseException:
        _stop_children(children)
        stop_spark(state)  # and forget the pids
        raise
    return spark


def _stop_children(children: Mapping[str, subprocess.Popen[bytes]]) -> None:
    """Stop daemons this process just started, through their handles (see :func:`_wait` on why)."""
    for child in children.values():
        if child.poll() is None:
            child.terminate()
    for child in children.values():
        try:
            child.wait(timeout=30)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def stop_spark(state: StackState) -> None:
    """Stop the recorded master and workers (only pids whose command line names the state folder)."""
    spark = state.spark
    if spark is None:
        return
    marker = state.state_dir
    pids = [w.pid for w in spark.workers] + [spark.master.pid]
    # Signal all first, then wait: each JVM takes a moment to shut down, and they need not take turns.
    for pid in pids:
        if pid is not None and pid_alive(pid, marker):
            os.kill(pid, signal.SIGTERM)
    for pid in pids:
        stop_pid(pid, marker)
    spark.master.pid = None
    for w in spark.workers:
        w.pid = None
    state.save()


def spark_status(state: StackState) -> dict[str, Any] | None:
    """The recorded daemons (pids, addresses, logs) joined with the master's view of its workers."""
    spark = state.spark
    if spark is None:
        return None
    marker = state.state_dir
    master_up = pid_alive(spark.master.pid, marker)
    info = master_json(spark.master.ui) if master_up else None
    seen = {int(w["port"]): w for w in (info or {}).get("workers", ())}
    workers = []
    for w in spark.workers:
        registered = seen.get(w.port, {})
        workers.append(
            {
                "worker_id": w.worker_id,
                "address": w.address,
                "web_ui": w.ui,
                "pid": w.pid,
                "running": pid_alive(w.pid, marker),
                "state": registered.get("state"),  # as the master sees it: ALIVE, DEAD, … or None
                "host": registered.get("host"),
                "cores": spark.cores,
                "memory": spark.memory,
                "log": w.log,
                "work_dir": w.work_dir,
            }
        )
    return {
        "master_url": spark.master_url,
        "web_ui": spark.master.ui,
        "pid": spark.master.pid,
        "running": master_up,
        "status": (info or {}).get("status"),
        "alive_workers": sum(1 for w in workers if w["state"] == "ALIVE"),
        "log": spark.master.log,
        "workers": workers,
    }


# --- Spark without brokers ----------------------------------------------------------------------------


def start_spark_cluster(
    state_dir: str | Path,
    workers: int = 2,
    settings: SparkSettings | None = None,
    java: str = "java",
    timeout: float = 120.0,
    progress: Progress = quiet,
    host: str = LOOPBACK,
    namespace: str = "",
) -> StackState:
    """Start only the Spark cluster in ``state_dir`` (a stack folder with or without brokers).

    For tests and jobs that need executors but no Kafka: the folder then records a stack without
    brokers, which ``ballast stack status`` and ``down`` handle like any other, and a later
    ``ballast stack up`` adds the brokers to. ``host`` and ``namespace`` as for :func:`start_spark`.
    """
    state_dir = Path(state_dir).resolve()
    state_dir.mkdir(parents=True, exist_ok=True)
    try:
        state = StackState.load(state_dir)
    except StackError:  # nothing recorded yet
        state = StackState(state_dir=str(state_dir), cluster_id="")
    start_spark(
        state, workers, settings=settings, java=java, timeout=timeout, progress=progress,
        host=host, namespace=namespace,
    )  # fmt: skip
    return state


def stop_spark_cluster(state_dir: str | Path) -> None:
    """Stop the Spark cluster recorded in ``state_dir``, leaving any brokers running."""
    try:
        state = StackState.load(Path(state_dir).resolve())
    except StackError:
        return
    stop_spark(state)
