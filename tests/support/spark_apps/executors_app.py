"""A PySpark application that proves where it ran: ``executors_app.py OUTPUT.json [TASKS]``.

Submitted with spark-submit by the cluster tests. It runs one job of TASKS tasks (2 by default);
each task reports, from /proc, the executor JVM it runs under (the CoarseGrainedExecutorBackend
process above its Python worker: executor id, worker URL, host name it was given), its working
folder (a worker's work dir on a cluster), its interpreter, and the TCP addresses its Python worker
and executor listen on. The driver adds the master it ran under, the executors Spark registered and
its own listening addresses, and writes everything to OUTPUT.json.

Why from /proc and not from Spark's APIs: PySpark has no executor id in a task, and a task that
merely ran proves nothing about *where* — the process tree does.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

EXECUTOR_MAIN = "org.apache.spark.executor.CoarseGrainedExecutorBackend"
LOOPBACK_HELPER = Path(__file__).resolve().parents[1] / "loopback.py"


def _cmdline(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")


def _parent(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2 :].split()[1])


def _executor_jvm() -> tuple[int, list[str]] | None:
    """The nearest ancestor process that is a Spark executor, with its command line."""
    pid = os.getpid()
    while pid > 1:
        cmd = _cmdline(pid)
        if EXECUTOR_MAIN in cmd:
            return pid, cmd
        pid = _parent(pid)
    return None


def _option(cmd: list[str], name: str) -> str | None:
    return cmd[cmd.index(name) + 1] if name in cmd else None


def probe(tasks):
    """One task's report (runs on an executor)."""
    import loopback  # shipped with sc.addPyFile
    from pyspark import TaskContext

    list(tasks)
    found = _executor_jvm()
    report = {
        "partition": TaskContext.get().partitionId(),
        "python": sys.executable,
        "cwd": os.getcwd(),
        "python_pid": os.getpid(),
        "executor_pid": None,
        "executor_id": None,
        "worker_url": None,
        "executor_host": None,
    }
    listening = loopback.listening(os.getpid()) | loopback.listening(_parent(os.getpid()))
    if found is not None:
        pid, cmd = found
        listening |= loopback.listening(pid)
        report.update(
            executor_pid=pid,
            executor_id=_option(cmd, "--executor-id"),
            worker_url=_option(cmd, "--worker-url"),
            executor_host=_option(cmd, "--hostname"),
        )
    report["listening"] = sorted(listening)
    yield report


def main() -> None:
    output = Path(sys.argv[1])
    tasks = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    sys.path.insert(0, str(LOOPBACK_HELPER.parent))
    import loopback
    from pyspark import SparkConf, SparkContext

    # a bare SparkContext: a SparkSession would load Spark SQL for nothing (seconds on a busy machine)
    sc = SparkContext.getOrCreate(SparkConf().setAppName("ballast-executors-probe"))
    sc.addPyFile(str(LOOPBACK_HELPER))
    reports = sc.parallelize(range(tasks), tasks).mapPartitions(probe).collect()
    driver_pids = [os.getpid(), os.getppid()]  # the Python driver and spark-submit's JVM
    result = {
        "master": sc.master,
        "app_id": sc.applicationId,
        "executor_ids": sorted(i for i in sc._jsc.sc().getExecutorIds().mkString(",").split(",") if i),
        "tasks": sorted(reports, key=lambda r: r["partition"]),
        "driver_listening": sorted(set().union(*(loopback.listening(pid) for pid in driver_pids))),
    }
    sc.stop()
    output.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
