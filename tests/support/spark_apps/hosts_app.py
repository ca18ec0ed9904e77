"""A PySpark application that says where each part of it ran: ``hosts_app.py OUTPUT.json N RELEASE MASTER``.

Submitted across hosts by tests/integration/spark_jobs/test_submit_across_hosts.py. It counts and
sums ``range(N)`` in four tasks, and each task reports where it ran: the network namespace of its
process (``/proc/self/ns/net``), its working folder, the executor JVM above it (from /proc: its
worker URL and the host name its worker gave it), its interpreter, and where its ``ballast`` was
imported from together with the Avro schema names that copy reads (Ballast's code reaches the
executors only in the archive spark-submit ships). The driver adds its own namespace, the address
Spark says it advertises and the ports of PySpark's channel between its JVM and its Python process
(the JVM's Py4J gateway, the Python side's accumulator server), writes everything to OUTPUT.json, and
then waits until the file RELEASE exists (at most two minutes) before it stops, so the test can
look at the listening sockets of a running application.

Its session comes from :func:`spark_jobs.session.local_spark` with the MASTER, as the reduce's does:
under spark-submit that session must keep the driver address the submit chose.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

EXECUTOR_MAIN = "org.apache.spark.executor.CoarseGrainedExecutorBackend"


def _cmdline(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")


def _parent(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2 :].split()[1])


def _option(cmd: list[str], name: str) -> str | None:
    return cmd[cmd.index(name) + 1] if name in cmd else None


def count(index, values):
    """One task: the count and sum of its slice, and where it ran (on an executor)."""
    import ballast
    from ballast.avro.codec import SchemaStore

    numbers = list(values)
    executor = None
    pid = os.getpid()
    while pid > 1 and executor is None:
        cmd = _cmdline(pid)
        executor = cmd if EXECUTOR_MAIN in cmd else None
        pid = _parent(pid)
    yield {
        "partition": index,
        "count": len(numbers),
        "sum": sum(numbers),
        "net": os.readlink("/proc/self/ns/net"),
        "cwd": os.getcwd(),
        "python": sys.executable,
        "ballast": ballast.__file__,
        "schemas": SchemaStore.from_dir().names(),
        "worker_url": _option(executor, "--worker-url") if executor else None,
        "executor_host": _option(executor, "--hostname") if executor else None,
    }


def main() -> None:
    output, n, release, master = Path(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3]), sys.argv[4]
    from spark_jobs.session import local_spark

    sc = local_spark("ballast-hosts-probe", master=master, shuffle_partitions=4).sparkContext
    tasks = sc.parallelize(range(n), 4).mapPartitionsWithIndex(count).collect()
    result = {
        "app_id": sc.applicationId,
        "count": sum(t["count"] for t in tasks),
        "sum": sum(t["sum"] for t in tasks),
        "tasks": sorted(tasks, key=lambda t: t["partition"]),
        "driver": {
            "net": os.readlink("/proc/self/ns/net"),
            "host": sc.getConf().get("spark.driver.host"),
            "jvm_pid": os.getppid(),  # spark-submit's JVM started this Python driver
            "py4j_port": sc._gateway.gateway_parameters.port,
            "python_pid": os.getpid(),
            # where the JVM sends accumulator updates to this Python process
            "accumulator_port": sc._accumulatorServer.server_address[1],
        },
    }
    output.with_suffix(".tmp").write_text(json.dumps(result, indent=2))
    output.with_suffix(".tmp").replace(output)
    deadline = time.monotonic() + 120
    while not release.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    sc.stop()


if __name__ == "__main__":
    main()
