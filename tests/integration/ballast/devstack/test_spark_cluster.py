"""The Spark standalone cluster of ``ballast stack up --spark``: two workers register ALIVE on
loopback, an application submitted with spark_jobs.submit runs its tasks in the cluster's executors
(not in the driver), nothing listens beyond 127.0.0.1, and ``stack down`` leaves no daemon behind.

The first two tests share the session's ``spark_cluster``; the last two start small clusters of
their own, because they stop them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ballast.devstack.processes import pid_alive, port_open
from ballast.devstack.spark_cluster import SparkSettings, start_spark_cluster
from ballast.devstack.stack import stack_status
from ballast.devstack.state import StackError, StackState
from spark_jobs.submit import SubmitSettings, master_url_from_state, run_submit, submit_command
from tests.support.loopback import listening, not_loopback

APP = Path(__file__).resolve().parents[3] / "support" / "spark_apps" / "executors_app.py"


def _processes_naming(folder: str | Path) -> list[int]:
    """Pids whose command line names ``folder``: what the stack's pid rule would take for ours."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and pid_alive(int(proc.name), str(folder)):
            found.append(int(proc.name))
    return found


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ballast.cli", *args], capture_output=True, text=True, timeout=120
    )


def test_status_shows_two_alive_workers_on_loopback(spark_cluster):
    state: StackState = spark_cluster
    done = _cli("stack", "status", "--json", "--state-dir", state.state_dir)
    assert done.returncode == 0, done.stderr
    spark = json.loads(done.stdout)["spark"]
    assert spark["master_url"] == state.spark.master_url
    assert spark["master_url"].startswith("spark://127.0.0.1:")
    assert (spark["running"], spark["status"], spark["alive_workers"]) == (True, "ALIVE", 2)
    for worker in spark["workers"]:
        assert worker["running"] and worker["state"] == "ALIVE"
        assert worker["host"] == "127.0.0.1" and worker["address"].startswith("127.0.0.1:")

    text = _cli("stack", "status", "--state-dir", state.state_dir)
    assert "2 of 2 workers ALIVE" in text.stdout

    # every port each daemon opened (not only the recorded ones) is on loopback
    recorded = {state.spark.master.pid: {state.spark.master.port, state.spark.master.ui_port}}
    recorded |= {w.pid: {w.port, w.ui_port} for w in state.spark.workers}
    for pid, ports in recorded.items():
        bound = listening(pid)
        assert ports <= {port for _, port in bound}, (pid, bound)
        assert not not_loopback(bound), (pid, bound)


def test_submitted_app_runs_in_the_clusters_executors(spark_cluster, tmp_path):
    state: StackState = spark_cluster
    master = master_url_from_state(state.state_dir)
    output, log = tmp_path / "executors.json", tmp_path / "driver.log"
    settings = SubmitSettings(total_executor_cores=2, executor_memory="512m")
    command = submit_command(APP, [str(output), "2"], master=master, settings=settings)

    code = run_submit(command, log=log, timeout=240)

    assert code == 0, log.read_text()[-4000:]
    result = json.loads(output.read_text())
    assert result["master"] == master
    assert len(result["executor_ids"]) >= 1
    assert [t["partition"] for t in result["tasks"]] == [0, 1]
    workers = {f"spark://Worker@127.0.0.1:{w.port}": w for w in state.spark.workers}
    for task in result["tasks"]:
        # the task ran under an executor of this cluster, launched by one of its workers
        assert task["executor_id"] in result["executor_ids"], task
        assert task["worker_url"] in workers, task
        assert task["executor_host"] == "127.0.0.1"
        work_dir = workers[task["worker_url"]].work_dir
        assert task["cwd"].startswith(f"{work_dir}/{result['app_id']}/"), task
        assert task["python"] == sys.executable
        bound = {(a, p) for a, p in task["listening"]}
        assert not not_loopback(bound), task
    assert not not_loopback({(a, p) for a, p in result["driver_listening"]}), result


def test_stack_down_stops_every_spark_daemon(tmp_path):
    state = start_spark_cluster(tmp_path / "stack", workers=1, settings=SparkSettings.from_args())
    pids = [pid for _, pid, _ in state.spark.processes()]
    ports = [state.spark.master.port, *(w.port for w in state.spark.workers)]
    assert all(pid_alive(pid, state.state_dir) for pid in pids)
    with pytest.raises(StackError, match="runs a Spark cluster with 1 worker;"):
        start_spark_cluster(tmp_path / "stack", workers=2)  # another size needs a `stack down` first

    done = _cli("stack", "down", "--state-dir", state.state_dir)

    assert done.returncode == 0, done.stderr
    assert not any(pid_alive(pid, state.state_dir) for pid in pids)
    assert _processes_naming(state.state_dir) == []
    assert not any(port_open(port) for port in ports)
    status = stack_status(state.state_dir)["spark"]
    assert status["running"] is False and status["pid"] is None  # type: ignore[index]


def test_a_daemon_that_cannot_start_is_one_error_naming_its_log(tmp_path):
    settings = SparkSettings(spark_daemon_heap="lots")  # java refuses -Xmxlots and exits at once
    failed = r"Spark master exited while starting; see .*/spark/master\.log"
    with pytest.raises(StackError, match=failed) as err:
        start_spark_cluster(tmp_path / "stack", workers=1, settings=settings, timeout=60)
    assert "Invalid maximum heap size" in str(err.value)  # the log's tail comes with the error
    state = StackState.load(tmp_path / "stack")
    assert not any(pid for _, pid, _ in state.spark.processes())
    assert _processes_naming(state.state_dir) == []
