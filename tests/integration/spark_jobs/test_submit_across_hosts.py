"""A PySpark application submitted from one host to a Spark standalone cluster on another
(ballast/devstack/hosts.py: network namespaces on a bridge), with Ballast's submit code
(spark_jobs/submit.py) as ``ballast reduce submit`` uses it: the driver advertises the address of
its route to the master (nobody gives it), and the application's session, made as the reduce's
is (spark_jobs/session.py), keeps that address; Ballast's code reaches the executors only in the
archive it ships, the executors' tasks run on the worker's host and the totals are exact.

Nothing of the layout listens on loopback, with one exception that Spark makes by design and the
test pins down exactly: PySpark's channel between a JVM and its own Python processes is bound to
loopback in Spark (on the driver, the JVM's Py4J gateway, ``Py4JServer``, and the Python
side's accumulator server, ``pyspark/accumulators.py``; on the executors, the Python worker daemon,
``pyspark/daemon.py``): reachable only from that host, it carries no traffic between hosts. Those
sockets are identified by their owner and port (the driver's JVM and Python process at the ports
the driver reports; a ``pyspark.daemon`` process) and every other listening socket must be bound
to its host's own address.

No broker here: the application touches no Kafka, and what is under test is where Spark's
processes run and bind. A few minutes at most (one master, one worker, one small job).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ballast.devstack import hosts
from ballast.devstack.jvm import StackSettings
from ballast.devstack.spark_cluster import SparkSettings, start_spark_cluster, stop_spark_cluster
from ballast.paths import PROJECT_ROOT, SCHEMAS_DIR
from ballast.waiting import wait_until
from spark_jobs.shipping import UNPACKED
from tests.support.host_sockets import sockets as host_sockets

pytestmark = pytest.mark.skipif(bool(hosts.available()), reason=hosts.available() or "available")

APP = Path(__file__).resolve().parents[2] / "support" / "spark_apps" / "hosts_app.py"
N = 100_000

# run inside host "apps": Ballast's own submit path, the settings as a user's defaults leave them
# (no --driver-host, --python this interpreter, the code shipped), only the resources kept small
SUBMIT = """
import sys
from spark_jobs.submit import SubmitSettings, submit_app
master, app, log, *args = sys.argv[1:]
settings = SubmitSettings(total_executor_cores=1, executor_memory="512m")
sys.exit(submit_app(app, args, master=master, settings=settings, log=log, timeout=300))
"""


def _net_of(namespace: str) -> str:
    """How /proc/PID/ns/net names a process's network namespace when it is ``namespace``."""
    return f"net:[{os.stat(f'/run/netns/{namespace}').st_ino}]"


def test_an_application_submitted_from_another_host_runs_on_the_workers_host_and_binds_no_loopback(
    tmp_path,
) -> None:
    net = hosts.create(hosts.plan_hosts(["spark", "apps"]), tmp_path / "net")
    spark_host, apps = net.host("spark"), net.host("apps")
    spark_net, apps_net = _net_of(spark_host.namespace), _net_of(apps.namespace)
    output, release, log = tmp_path / "result.json", tmp_path / "release", tmp_path / "driver.log"
    try:
        state = start_spark_cluster(
            tmp_path / "spark", workers=1, settings=SparkSettings.from_args(),
            java=StackSettings.from_args().java, host=spark_host.address, namespace=spark_host.namespace,
        )  # fmt: skip
        try:
            spark, master = state.spark, f"spark://{spark_host.address}:"
            assert spark is not None and spark.master_url == f"{master}{spark.master.port}"
            worker = spark.workers[0]
            submit = subprocess.Popen(
                net.argv("apps", [sys.executable, "-c", SUBMIT, spark.master_url, str(APP), str(log),
                                  str(output), str(N), str(release), spark.master_url]),
                cwd=PROJECT_ROOT, env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)},
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
            try:
                wait_until(lambda: output.exists() or submit.poll() is not None, 240, "the app's result")
                found = {name: host_sockets(net, name, listening_only=True) for name in ("spark", "apps")}
                sockets = {name: [(s.address, s.port, s.owners) for s in f] for name, f in found.items()}
                release.touch()
                code = submit.wait(timeout=120)
            finally:
                if submit.poll() is None:
                    os.killpg(submit.pid, signal.SIGTERM)
                    submit.wait(timeout=30)
            said = submit.stdout.read().decode(errors="replace") if submit.stdout else ""
            assert code == 0, said + (log.read_text()[-4000:] if log.exists() else "")
        finally:
            stop_spark_cluster(tmp_path / "spark")
    finally:
        hosts.teardown(net)
    assert hosts.leftovers(net.tag) == []

    result = json.loads(output.read_text())
    assert (result["count"], result["sum"]) == (N, N * (N - 1) // 2)  # every number, once

    # the driver ran on "apps" and advertised its address there, found from the route to the master
    driver = result["driver"]
    assert driver["net"] == apps_net
    assert driver["host"] == apps.address

    # every task ran in an executor the worker on "spark" launched, with the code it was shipped
    written = [json.loads(path.read_text()) for path in SCHEMAS_DIR.glob("*.avsc")]
    schemas = sorted(f"{s['namespace']}.{s['name']}" for s in written)
    assert [t["partition"] for t in result["tasks"]] == [0, 1, 2, 3]
    for task in result["tasks"]:
        assert task["net"] == spark_net, task
        assert task["worker_url"] == f"spark://Worker@{spark_host.address}:{worker.port}", task
        assert task["executor_host"] == spark_host.address, task
        assert task["cwd"].startswith(f"{worker.work_dir}/{result['app_id']}/"), task
        assert task["ballast"] == f"{task['cwd']}/{UNPACKED}/ballast/__init__.py", task
        assert task["schemas"] == schemas, task
        assert task["python"] == sys.executable, task

    # sockets: each host's own address, save PySpark's JVM-to-Python channel (see the docstring)
    own = {"spark": spark_host.address, "apps": apps.address}
    recorded = {spark.master.port, spark.master.ui_port, worker.port, worker.ui_port}
    assert recorded <= {port for address, port, _ in sockets["spark"] if address == spark_host.address}
    assert [s for s in sockets["apps"] if s[0] == apps.address and driver["jvm_pid"] in s[2]]  # its RPC
    channel = {(driver["py4j_port"], driver["jvm_pid"]), (driver["accumulator_port"], driver["python_pid"])}
    for name, found in sockets.items():
        for address, port, owners in found:
            if address == own[name]:
                continue
            assert address in ("127.0.0.1", "::1") and owners, (name, address, port, owners, found)
            if name == "apps":
                assert {(port, pid) for pid in owners} <= channel, (address, port, owners, channel)
            else:
                assert all("pyspark.daemon" in cmd for cmd in owners.values()), (address, port, owners)
