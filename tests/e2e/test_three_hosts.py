"""Ballast across three hosts (issue "On your own cluster", acceptance 1; docs/deploy.md).

The hosts are network namespaces on a bridge (ballast/devstack/hosts.py), each with its own address
and its own loopback, so an address that works only on one machine fails here as it would on three:

* host ``kafka``: three KRaft brokers and a Kafka Connect worker (``start_stack``, as
  ``ballast stack up --brokers 3 --connect`` runs them, bound to that host's address);
* host ``spark``: a Spark standalone master and two workers (``start_spark_cluster``);
* host ``apps``: ``ballast topics create``, then the routers, the controller, the shedder and the
  reduce's driver, each started with its own ``ballast`` command: the README's "Your own Kafka and
  Spark" commands, plus flags that make a short run (``ballast reduce submit --master
  spark://<spark>:<port>``, no ``--driver-host``: the driver finds its address from the route to
  the master; the executors get Ballast's code in the archive the submit ships).

The input drifts: a Zipf stream over 2,000 keys, then eight keys that all hash to worker 0 take
40 % of it. The controller is asked to rebalance once the drift is under way and moves seven of
them in a paced migration (``--pacing batched --step-keys 4``: two steps); the state of each moved
key travels through Kafka between executors on host ``spark``. Once the migration is DONE, every
process of one Spark worker (its daemon, its executor's JVM and Python workers) is killed with
SIGKILL, as when that machine fails, and more input follows: the job must go on on the other
worker. Every output row is judged against the single-process reference of the same input
(tests/support/output_judge.py).

Loopback: every host's sockets are read every 2 s, from the driver's start to the end of the
results. No socket of the layout may listen on or be connected to loopback, or listen on every
address (which includes loopback), except PySpark's channel between a JVM and its own Python
processes, which Spark puts on loopback by design and which carries nothing between hosts: on
``apps`` the driver's (spark-submit's JVM and the driver's Python), on ``spark`` the executors'
(``CoarseGrainedExecutorBackend`` and ``pyspark.daemon``), whose ``transformWithStateInPandas``
state server listened on every address before Spark 4.2.0 (Spark's code, not ours:
:func:`loopback_misuse`). The
brokers, Connect, the Spark master and workers, the routers, the controller and the shedder own no
such socket at all. A connection that opens and closes between two reads is not seen; every
long-lived one (each Kafka client's, each Spark RPC's) is, many times over.

A few minutes (the three hosts' JVMs, a Spark job, ~200,000 events).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import urllib.request
from typing import Any

import pytest

from ballast.devstack import hosts
from ballast.devstack.jvm import StackSettings
from ballast.devstack.processes import descendants, pid_alive
from ballast.devstack.security import stack_admin
from ballast.devstack.services import ballast_argv
from ballast.devstack.spark_cluster import SparkSettings, start_spark_cluster, stop_spark_cluster
from ballast.devstack.stack import start_stack, stop_stack
from ballast.waiting import wait_until
from ballast.workload import FLUSH_KEY
from tests.e2e.test_controller import (
    ask_for_a_migration,
    control_log,
    eight_hot_keys_on_one_worker,
    migration_story,
    step_keys,
)
from tests.support import reduce_reference
from tests.support.host_sockets import Socket, sockets
from tests.support.output_judge import assert_rows_right, judge
from tests.support.reduce_kit import INPUT_PARTITIONS, WORKERS, ReduceKit, reduce_events

pytestmark = pytest.mark.skipif(bool(hosts.available()), reason=hosts.available() or "available")

BEFORE, DRIFT, AFTER = 30_000, 120_000, 40_000  # events: before the drift, during it, after the kill
RATE = 4_000
AGG = "aggregate:size=4s,slide=2s"
JOB_ARGS = ("--watermark-delay", "10 seconds", "--max-offsets-per-trigger", "40000")
HOSTS = ("kafka", "spark", "apps")


def drifting_events() -> list[dict[str, Any]]:
    """A Zipf(1.0) stream, then the hot set moves to eight keys of one worker; one event list with
    continuous event times and payloads (each event's index, as the reference and the letters use)."""
    first = reduce_events(BEFORE, seed=29)
    then = eight_hot_keys_on_one_worker(DRIFT + AFTER, seed=31)
    shift = first[-1]["event_time"] + 1 - then[0]["event_time"]
    return first + [
        {**e, "payload": (BEFORE + i).to_bytes(8, "big"), "event_time": e["event_time"] + shift}
        for i, e in enumerate(then)
    ]


EXECUTOR_JVM = "CoarseGrainedExecutorBackend"
EXECUTOR_SIDE = (EXECUTOR_JVM, "pyspark.daemon")  # an executor's JVM, its Python workers
PYSPARK_HOSTS = ("spark", "apps")


def loopback_misuse(net: hosts.HostNet, driver_pid: int) -> list[tuple[str, Socket]]:
    """Sockets of the layout on (or listening beyond) loopback that are not PySpark's channel.

    A live socket is judged by its owners. On ``apps``: one of them is the driver's (below the
    reduce service's process: spark-submit's JVM, the driver's Python), and every other one that
    still runs is too (a child the JVM forks, e.g. a ``readlink`` of Hadoop's local file system,
    holds its sockets for a moment). On ``spark``: every owner whose command line could be read is
    an executor's JVM or Python worker, and none listens on every address: Spark 4.0.0's
    ``transformWithStateInPandas`` state server did (``new ServerSocket(0, 1)``), 4.2.0, the
    version Ballast pins, binds it to loopback (``TransformWithStateInPySparkPythonRunnerUtils``;
    docs/deploy.md, "Ports"). A socket with no
    owner is let pass on the hosts where PySpark runs, never on ``kafka``: a closed connection
    waiting out TIME-WAIT has none any more (PySpark's per-task connections end this way), and
    nor has a per-task listener closed between ``ss``'s read of the sockets and of their owners."""
    bad = []
    for name in HOSTS:
        found = sockets(net, name)
        driver = set(descendants(driver_pid)) | {driver_pid} if name == "apps" else set()
        for sock in found:
            if not (sock.on_loopback or (sock.listening and sock.wildcard)):
                continue
            if not sock.owners:
                if name not in PYSPARK_HOSTS:
                    bad.append((name, sock))
            elif name == "apps":
                running = {pid for pid, cmd in sock.owners.items() if cmd and pid_alive(pid)}
                if sock.wildcard or not (set(sock.owners) & driver) or not running <= driver:
                    bad.append((name, sock))
            elif name == "spark":
                known = [cmd for cmd in sock.owners.values() if cmd]
                if sock.wildcard or not all(any(mark in cmd for mark in EXECUTOR_SIDE) for cmd in known):
                    bad.append((name, sock))
            else:
                bad.append((name, sock))
    return bad


class LoopbackWatch(threading.Thread):
    """Reads every host's sockets every ``period`` seconds while the run goes on, and keeps what
    :func:`loopback_misuse` finds (each socket once)."""

    def __init__(self, net: hosts.HostNet, driver_pid: int, period: float = 2.0) -> None:
        super().__init__(daemon=True)
        self.net, self.driver_pid, self.period = net, driver_pid, period
        self.reads = 0
        self.found: dict[tuple[str, str, int, str, int], tuple[str, Socket]] = {}
        self.error: BaseException | None = None
        self._stop_asked = threading.Event()

    def read(self) -> None:
        for host, sock in loopback_misuse(self.net, self.driver_pid):
            self.found.setdefault((host, sock.address, sock.port, sock.peer, sock.peer_port), (host, sock))
        self.reads += 1

    def run(self) -> None:
        while not self._stop_asked.wait(self.period):
            try:
                self.read()
            except BaseException as exc:  # reported by the test's thread
                self.error = exc
                return

    def stop(self) -> None:
        self._stop_asked.set()
        self.join(30)


def test_three_hosts_drift_a_paced_migration_and_a_lost_worker_stay_exact(tmp_path) -> None:
    net = hosts.create(hosts.plan_hosts(list(HOSTS)), tmp_path / "net")
    kafka_host, spark_host, apps = (net.host(n) for n in HOSTS)
    java = StackSettings.from_args().java
    found: dict[str, Any] = {}
    try:
        stack = start_stack(
            tmp_path / "kafka", brokers=3, connect=True,
            host=kafka_host.address, namespace=kafka_host.namespace,
        )  # fmt: skip
        found["stack"] = stack
        cluster = start_spark_cluster(
            tmp_path / "spark", workers=2, settings=SparkSettings.from_args(), java=java,
            host=spark_host.address, namespace=spark_host.namespace,
        ).spark  # fmt: skip
        assert cluster is not None
        found["cluster"] = cluster
        kafka = stack_admin(stack, "three-hosts")
        prefix = f"three-{tmp_path.name[-8:]}"
        create = ballast_argv([
            "topics", "create", "--prefix", prefix, "--workers", str(WORKERS),
            "--input-partitions", str(INPUT_PARTITIONS), "--bootstrap", stack.bootstrap,
        ])  # fmt: skip
        done = subprocess.run(net.argv("apps", create), capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-3000:]
        kit = ReduceKit(kafka, prefix, tmp_path / "apps", create=False, namespace=apps.namespace)
        try:
            _run(kit, net, cluster, found)
        finally:
            kit.close()
    finally:
        if "cluster" in found:
            stop_spark_cluster(tmp_path / "spark")
        if "stack" in found:
            stop_stack(tmp_path / "kafka")
        hosts.teardown(net)
    assert hosts.leftovers(net.tag) == []

    # --- the layout: every address is its host's own -------------------------------------------
    assert {n.host for n in found["stack"].nodes} == {kafka_host.address}
    assert found["connect_url"].startswith(f"http://{kafka_host.address}:")
    assert found["brokers_seen"] == {kafka_host.address}  # what the brokers advertise
    assert cluster.master_url.startswith(f"spark://{spark_host.address}:")
    said = found["driver_log"]
    assert cluster.master_url in said
    # the driver advertised its own address on host apps: the executors connected to it there
    assert found["executors_to_driver"], "no executor on host spark held a connection to the driver"
    watch = found["loopback"]
    assert watch.error is None, watch.error
    assert watch.reads >= 20, f"only {watch.reads} reads of the hosts' sockets"
    assert not watch.found, f"loopback sockets outside PySpark's channel: {list(watch.found.values())}"
    assert found["listening"]["kafka"] and found["listening"]["spark"]

    # --- the migration, and the results ---------------------------------------------------------
    story = found["story"]
    assert (len(story["START"]), len(story["DONE"]), len(story["ABORT"])) == (1, 1, 0)
    moves = [(k, u["epoch"]) for u in story["STEP"] for k in step_keys(u)]
    assert len(story["STEP"]) >= 2 and moves  # paced: more than one step
    assert set(moves) <= found["installed"], "a moved key's state was never installed at its step"
    assert found["killed"] and not found["killed_alive"], "the worker's processes were not all killed"
    assert found["after_kill"] == set(range(WORKERS)), "not every worker stepped after the kill"
    assert_rows_right(found["verdict"])


def _run(kit: ReduceKit, net: hosts.HostNet, cluster: Any, found: dict[str, Any]) -> None:
    """The run itself (see the module docstring); what the test asserts goes into ``found``."""
    events = drifting_events()
    stack = found["stack"]
    found["connect_url"] = stack.connect.url
    with urllib.request.urlopen(stack.connect.url, timeout=30) as answer:  # Connect answers on host kafka
        assert json.loads(answer.read())["version"]
    controller = kit.pipe.controller(
        "c1", rebalance=False, interval_s=3, pricing="records", forecast=False, plan_theta=0.2,
        pacing="batched", step_keys=4, step_timeout_s=180,
    )  # fmt: skip
    for rid in ("r1", "r2"):
        kit.start_router(rid)
    kit.submit_job("agg", AGG, cluster.master_url, *JOB_ARGS)
    kit.pipe.start(controller)
    kit.pipe.start(kit.pipe.shedder(f"topic={kit.input},target=60s,priority=1,min-accuracy=0.5",
                                    cycle_s=2, dry_run=True))  # fmt: skip
    for name in ("router-r1", "router-r2", kit.jobs["agg"]):
        kit.pipe.wait_ready(name, 300)
    watch = LoopbackWatch(net, kit.pipe.service(kit.jobs["agg"]).pid or 0)
    watch.read()  # one read at once: a failing read fails here, not silently in the thread
    watch.start()
    kit.produce(events[:BEFORE], RATE)
    kit.wait_stats("agg", lambda s: s.records > 0, timeout=300)

    feeding: dict[str, BaseException] = {}

    def feed(part: list[dict[str, Any]]) -> threading.Thread:
        def run() -> None:
            try:
                kit.produce(part, RATE)
            except BaseException as exc:  # reported by the test's thread
                feeding["error"] = exc

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        return thread

    drift = feed(events[BEFORE : BEFORE + DRIFT])
    # the controller plans from its last interval's load: ask once that interval is the drift's
    # (asked during the Zipf phase, it plans up to ~200 small keys in ~50 steps instead of the
    # eight hot ones in two)
    kit.pipe.wait_routed(BEFORE + DRIFT // 4, 300)
    mid = ask_for_a_migration(kit)

    def ended() -> bool:
        story = migration_story(control_log(kit), mid)
        return bool(story["DONE"] or story["ABORT"])

    wait_until(ended, 600, f"migration {mid} DONE or ABORT", 1.0)
    drift.join(600)
    assert not drift.is_alive() and not feeding, feeding
    found["story"] = migration_story(control_log(kit), mid)
    workers = list(cluster.workers)
    found["listening"] = {n: [s for s in sockets(net, n) if s.listening] for n in HOSTS}
    driver = set(descendants(kit.pipe.service(kit.jobs["agg"]).pid or 0))
    driver_ports = {s.port for s in found["listening"]["apps"] if set(s.owners) & driver}
    found["executors_to_driver"] = [
        s for s in sockets(net, "spark")
        if s.state == "ESTAB" and s.peer == net.host("apps").address and s.peer_port in driver_ports
    ]  # fmt: skip

    # one worker's machine fails: its daemon, its executor and the executor's Python workers
    lost = workers[1]
    victims = [lost.pid, *descendants(lost.pid)] if lost.pid else []
    found["killed"] = victims
    steps_before = len(kit.worker_stats("agg"))
    for pid in victims:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not any(pid_alive(p) for p in victims), 60, "the lost worker's processes gone", 0.5)
    found["killed_alive"] = [p for p in victims if pid_alive(p)]
    rest = feed(events[BEFORE + DRIFT :])
    rest.join(600)
    assert not rest.is_alive() and not feeding, feeding
    kit.flush_after(len(events), events[-1]["event_time"])
    every = reduce_reference.expected_aggregates(events, 4000, 2000)
    kit.wait_results("agg", every, timeout=900)
    stats = kit.worker_stats("agg")
    found["after_kill"] = {s.worker for s in stats[steps_before:] if s.records > 0}
    found["installed"] = {(c.key, c.epoch) for s in stats for c in s.chunks_installed}
    watch.stop()
    found["loopback"] = watch
    late = kit.left_out("agg", restarts=1)  # a batch the lost executor ran is run again
    kept = [e for i, e in enumerate(events) if i not in late]
    counted = reduce_reference.expected_aggregates(kept, 4000, 2000)
    found["verdict"] = judge(kit.rows("agg"), counted, every, ignore_keys=[FLUSH_KEY])
    found["brokers_seen"] = kafka_metadata(kit)
    found["driver_log"] = kit.job_log("agg").read_text(errors="replace")


def kafka_metadata(kit: ReduceKit) -> set[str]:
    """The hosts the brokers advertise, as a client sees them."""
    from ballast.kafka.admin import make_admin

    brokers = make_admin(kit.kafka).list_topics(timeout=30).brokers.values()
    return {b.host for b in brokers}
