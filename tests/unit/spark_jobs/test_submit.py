"""The spark-submit command line, its environment, and the master URL read from a stack folder.

Why no cluster here: every "the job binds to the wrong address / runs the wrong Python / lacks the
Kafka connector" problem is in the argv, so the argv is checked whole; the integration tests
(tests/integration/ballast/devstack/test_spark_cluster.py, and across hosts
tests/integration/spark_jobs/test_submit_across_hosts.py) run it on a real cluster. The driver's
address found from the route is judged against ``ip route get``, the kernel's own answer.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ballast.cli.console import UsageError
from ballast.devstack.state import StackError
from spark_jobs.addresses import DriverAddressError, driver_address
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
        "--deploy-mode",
        "client",
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
    env = {
        "BALLAST_SPARK_MASTER": "spark://127.0.0.1:1",
        "BALLAST_SPARK_TOTAL_EXECUTOR_CORES": "3",
        "BALLAST_SPARK_DRIVER_HOST": "10.9.8.7",
        "BALLAST_SPARK_PYTHON": "/opt/py/bin/python3",
        "BALLAST_SPARK_SHIP_CODE": "false",
    }
    settings = SubmitSettings.from_args(env=env)
    assert (settings.master, settings.total_executor_cores) == ("spark://127.0.0.1:1", 3)
    assert (settings.driver_host, settings.python, settings.ship_code) == (
        "10.9.8.7",
        "/opt/py/bin/python3",
        False,
    )
    assert SubmitSettings().ship_code is True


# --- the driver's address ------------------------------------------------------------------------------


def _kernel_source(address: str) -> str | None:
    """The source address the kernel picks to reach ``address`` (``ip route get``), None: no route."""
    if shutil.which("ip") is None:
        pytest.skip("no ip command (iproute2) to ask the kernel")
    done = subprocess.run(["ip", "-o", "route", "get", address], capture_output=True, text=True)
    words = done.stdout.split()
    return words[words.index("src") + 1] if done.returncode == 0 and "src" in words else None


def _own_address() -> str:
    """One of this machine's non-loopback IPv4 addresses (``ip -o -4 addr``)."""
    if shutil.which("ip") is None:
        pytest.skip("no ip command (iproute2)")
    out = subprocess.run(
        ["ip", "-o", "-4", "addr", "show", "scope", "global"], capture_output=True, text=True
    )
    found = [line.split()[3].split("/")[0] for line in out.stdout.splitlines() if line.strip()]
    if not found:
        pytest.skip("this machine has no non-loopback IPv4 address")
    return found[0]


def _driver_confs(cmd: list[str]) -> tuple[str, str]:
    confs = dict(c.split("=", 1) for c in _confs(cmd))
    return confs["spark.driver.host"], confs["spark.driver.bindAddress"]


def test_a_master_on_loopback_keeps_the_driver_on_loopback():
    assert _driver_confs(_command()) == ("127.0.0.1", "127.0.0.1")
    assert _driver_confs(_command(master="spark://localhost:7077")) == ("127.0.0.1", "127.0.0.1")


def test_a_master_elsewhere_gets_the_address_of_the_route_to_it():
    own = _own_address()  # a master on this machine's network address: the route's source is that address
    assert _kernel_source(own) == own
    cmd = _command(master=f"spark://{own}:7077")
    assert _driver_confs(cmd) == (own, own)
    assert submit_env(cmd, {})["SPARK_LOCAL_IP"] == own  # the environment agrees with the properties


def test_a_master_behind_a_gateway_gets_the_source_address_the_kernel_would_use():
    far = "198.51.100.7"  # TEST-NET-2: never a real host, routed like any other address
    expected = _kernel_source(far)
    if expected is None:
        pytest.skip(f"no route to {far} on this machine")
    assert driver_address(f"spark://{far}:7077") == expected != "127.0.0.1"
    # a master list (standby masters): the first one's route
    assert driver_address(f"spark://{far}:7077,127.0.0.1:7078") == expected


def test_driver_host_given_wins_over_the_route():
    cmd = _command(settings=SubmitSettings(driver_host="203.0.113.9"))
    assert _driver_confs(cmd) == ("203.0.113.9", "203.0.113.9")
    assert submit_env(cmd, {})["SPARK_LOCAL_IP"] == "203.0.113.9"
    # and needs no route: a master nobody can resolve is never looked up
    cmd = _command(
        master="spark://no-such-host.invalid:7077", settings=SubmitSettings(driver_host="10.0.0.4")
    )
    assert _driver_confs(cmd) == ("10.0.0.4", "10.0.0.4")


def test_a_master_that_cannot_be_resolved_asks_for_driver_host():
    with pytest.raises(DriverAddressError, match="--driver-host"):
        _command(master="spark://no-such-host.invalid:7077")


def test_a_master_url_that_is_not_standalone_is_refused_or_local():
    assert driver_address("local[2]") == "127.0.0.1"  # the executors run in the driver
    with pytest.raises(UsageError, match="spark://HOST:PORT"):
        driver_address("spark://")


# --- the executors' Python and Ballast's code ---------------------------------------------------------


def test_the_executors_python_is_the_setting_the_drivers_this_interpreter():
    confs = _confs(_command(settings=SubmitSettings(python="/opt/py/bin/python3")))
    assert "spark.pyspark.python=/opt/py/bin/python3" in confs
    assert f"spark.pyspark.driver.python={PY}" in confs


def test_the_code_archive_goes_to_the_executors_unpacked_and_on_their_path():
    cmd = _command(
        code="/tmp/submit-1/ballast-code.zip", settings=SubmitSettings(py_files="/home/me/acme.zip")
    )
    assert cmd[cmd.index("--archives") + 1] == "/tmp/submit-1/ballast-code.zip#ballast-code"
    assert "spark.executorEnv.PYTHONPATH=ballast-code" in _confs(cmd)
    assert cmd[cmd.index("--py-files") + 1] == "/home/me/acme.zip"  # a user's package still goes its way
    assert cmd.index("--archives") < cmd.index("/apps/job.py")
    plain = _command()
    assert "--archives" not in plain
    assert not [c for c in _confs(plain) if c.startswith("spark.executorEnv.PYTHONPATH")]


def test_environment_of_a_loopback_command_is_loopback_and_the_commands_own_spark_home():
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


# --- the session under spark-submit keeps the submit's address -------------------------------------------


def test_a_session_under_spark_submit_keeps_the_drivers_address():
    """``reduce submit`` runs ``reduce run`` under spark-submit: a builder option would override the
    address the submit chose and send a remote cluster's executors to 127.0.0.1."""
    from spark_jobs.session import driver_options

    own = _own_address()
    assert driver_options(f"spark://{own}:7077", {}, {"PYSPARK_GATEWAY_PORT": "40000"}) == {}
    # a driver this process starts: the same choice as the submit's
    assert driver_options(f"spark://{own}:7077", {}, {}) == {
        "spark.driver.host": own,
        "spark.driver.bindAddress": own,
    }
    assert driver_options(None, {}, {}) == {
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
    }
    assert (
        driver_options(f"spark://{own}:7077", {"spark.driver.host": "10.1.1.1"}, {}) == {}
    )  # the user's own
