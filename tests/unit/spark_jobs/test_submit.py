"""The spark-submit command line, its environment, and the master URL read from a stack folder.

Why no cluster here: every "the job binds to the wrong address / runs the wrong Python / lacks the
Kafka connector" problem is in the argv, so the argv is checked whole; the integration test
(tests/integration/ballast/devstack/test_spark_cluster.py) runs it on a real cluster.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from ballast.devstack.state import StackError
from spark_jobs.submit import (
    SubmitError,
    SubmitSettings,
    master_url_from_state,
    run_submit,
    submit_command,
    submit_env,
)

HOME = Path("/opt/pyspark")
PY = "/venv/bin/python"
JARS = ["/cache/jars/spark/a.jar", "/cache/jars/spark/b.jar"]


def _command(**kwargs) -> list[str]:
    kwargs.setdefault("master", "spark://127.0.0.1:7077")
    kwargs.setdefault("jars", JARS)
    kwargs.setdefault("python", PY)
    kwargs.setdefault("spark_home", HOME)
    return submit_command("/apps/job.py", ["--rows", "10"], **kwargs)


def _confs(cmd: list[str]) -> list[str]:
    return [cmd[i + 1] for i, arg in enumerate(cmd) if arg == "--conf"]


def test_the_whole_command_line():
    assert _command() == [
        "/opt/pyspark/bin/spark-submit",
        "--master",
        "spark://127.0.0.1:7077",
        "--jars",
        "/cache/jars/spark/a.jar,/cache/jars/spark/b.jar",
        "--conf",
        "spark.pyspark.python=/venv/bin/python",
        "--conf",
        "spark.pyspark.driver.python=/venv/bin/python",
        "--conf",
        "spark.driver.host=127.0.0.1",
        "--conf",
        "spark.driver.bindAddress=127.0.0.1",
        "--conf",
        "spark.ui.enabled=false",
        "--executor-memory",
        "1g",
        "/apps/job.py",
        "--rows",
        "10",
    ]


def test_extra_conf_adds_and_replaces_one_key_each():
    cmd = _command(conf={"spark.sql.shuffle.partitions": "8", "spark.ui.enabled": "true"})
    confs = _confs(cmd)
    assert "spark.sql.shuffle.partitions=8" in confs
    assert [c for c in confs if c.startswith("spark.ui.enabled=")] == ["spark.ui.enabled=true"]
    assert cmd[-3:] == ["/apps/job.py", "--rows", "10"]  # the application comes last, after every option


def test_cluster_resources_come_from_settings():
    settings = SubmitSettings(total_executor_cores=2, executor_memory="512m")
    cmd = _command(settings=settings)
    assert cmd[cmd.index("--total-executor-cores") + 1] == "2"
    assert cmd[cmd.index("--executor-memory") + 1] == "512m"
    assert "--total-executor-cores" not in _command()  # 0: whatever the cluster offers


def test_a_users_processor_package_goes_to_the_executors():
    cmd = _command(settings=SubmitSettings(py_files="/home/me/acme.zip"))
    assert cmd[cmd.index("--py-files") + 1] == "/home/me/acme.zip"
    assert cmd.index("--py-files") < cmd.index("/apps/job.py")  # spark-submit options come before the app
    assert "--py-files" not in _command()


def test_no_jars_no_jars_flag():
    assert "--jars" not in _command(jars=[])


def test_defaults_are_this_interpreter_and_the_installed_pyspark():
    cmd = submit_command("/apps/job.py", master="spark://127.0.0.1:7077", jars=[])
    assert Path(cmd[0]).parent.parent.joinpath("jars").is_dir()  # pyspark's own folder
    assert f"spark.pyspark.python={sys.executable}" in _confs(cmd)


def test_settings_read_their_environment_variables():
    env = {"BALLAST_SPARK_MASTER": "spark://127.0.0.1:1", "BALLAST_SPARK_TOTAL_EXECUTOR_CORES": "3"}
    settings = SubmitSettings.from_args(env=env)
    assert (settings.master, settings.total_executor_cores) == ("spark://127.0.0.1:1", 3)


def test_environment_is_loopback_and_the_commands_own_spark_home():
    base = {"PATH": "/bin", "SPARK_HOME": "/somewhere/else", "SPARK_LOCAL_IP": "10.0.0.5"}
    env = submit_env(_command(), base)
    assert env["SPARK_LOCAL_IP"] == "127.0.0.1"
    assert env["SPARK_HOME"] == "/opt/pyspark"
    assert env["PATH"] == "/bin"
    assert base["SPARK_HOME"] == "/somewhere/else"  # the caller's mapping is left alone


# --- the master URL recorded in a stack folder ----------------------------------------------------------


def _write_state(folder: Path, spark: dict | None) -> None:
    state = {"state_dir": str(folder), "cluster_id": "", "nodes": [], "connect": None}
    if spark is not None:
        state["spark"] = spark
    (folder / "stack.json").write_text(json.dumps(state))


def test_master_url_comes_from_the_recorded_master(tmp_path):
    spark = {
        "master": {"port": 41234, "ui_port": 41235, "log": "m.log", "pid": None},
        "workers": [{"worker_id": 1, "port": 1, "ui_port": 2, "work_dir": "w", "log": "w.log", "pid": None}],
        "cores": 1,
        "memory": "1g",
        "properties": "spark-defaults.conf",
    }
    _write_state(tmp_path, spark)
    assert master_url_from_state(tmp_path) == "spark://127.0.0.1:41234"


def test_a_stack_without_spark_says_how_to_start_it(tmp_path):
    _write_state(tmp_path, None)  # also the shape of folders written before Spark was in the stack
    with pytest.raises(StackError, match="stack up --spark"):
        master_url_from_state(tmp_path)


def test_no_stack_recorded(tmp_path):
    with pytest.raises(StackError, match="no stack recorded"):
        master_url_from_state(tmp_path / "nothing")


# --- running (a stand-in for spark-submit: any command) -----------------------------------------------


def test_run_returns_the_exit_code_and_keeps_the_output(tmp_path):
    log = tmp_path / "driver.log"
    script = "import os, sys; print(os.environ['SPARK_LOCAL_IP']); sys.exit(3)"
    assert run_submit([sys.executable, "-c", script], log=log) == 3
    assert log.read_text().strip() == "127.0.0.1"


def test_a_time_out_stops_the_driver_and_what_it_started(tmp_path):
    pids = tmp_path / "pids"
    # the "driver" starts a child (as spark-submit's JVM starts the Python driver) and hangs for
    # ten minutes: if both are gone once run_submit returns, it stopped them, it did not wait
    script = (
        "import os, subprocess, sys, time; "
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); "
        f"open({str(pids)!r}, 'w').write(f'{{os.getpid()}} {{p.pid}}'); time.sleep(600)"
    )
    with pytest.raises(SubmitError, match="did not finish within 3 s"):
        run_submit([sys.executable, "-c", script], log=tmp_path / "driver.log", timeout=3)
    for pid in map(int, pids.read_text().split()):
        deadline = time.monotonic() + 5  # the kill is sent; the process table may lag
        while _running(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _running(pid), pid


def _running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def test_a_missing_spark_submit_is_one_clear_error(tmp_path):
    with pytest.raises(SubmitError, match="cannot run"):
        run_submit([str(tmp_path / "bin" / "spark-submit"), "app.py"])
