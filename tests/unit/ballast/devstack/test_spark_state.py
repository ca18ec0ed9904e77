"""The Spark part of stack.json: planned on distinct loopback ports, saved and loaded whole, and
absent from folders written before Spark joined the stack."""

from __future__ import annotations

import json

from ballast.devstack.spark_cluster import SparkSettings, SparkState, _plan
from ballast.devstack.state import StackState


def test_plan_uses_distinct_ports_and_the_state_folder(tmp_path):
    spark = _plan(tmp_path, 3, SparkSettings(spark_worker_cores=2, spark_worker_memory="768m"))
    ports = [spark.master.port, spark.master.ui_port]
    ports += [p for w in spark.workers for p in (w.port, w.ui_port)]
    assert len(set(ports)) == len(ports) == 8
    assert spark.master_url == f"spark://127.0.0.1:{spark.master.port}"
    assert spark.master.ui.startswith("http://127.0.0.1:")
    assert [w.address for w in spark.workers] == [f"127.0.0.1:{w.port}" for w in spark.workers]
    assert (spark.cores, spark.memory) == (2, "768m")
    paths = [spark.master.log, spark.properties] + [p for w in spark.workers for p in (w.log, w.work_dir)]
    assert all(p.startswith(f"{tmp_path}/spark/") for p in paths)
    assert len({w.work_dir for w in spark.workers}) == 3


def test_stack_state_round_trip_with_spark(tmp_path):
    spark = _plan(tmp_path, 2, SparkSettings())
    spark.master.pid = 123
    spark.workers[1].pid = 456
    StackState(str(tmp_path), "", spark=spark).save()
    loaded = StackState.load(tmp_path)
    assert isinstance(loaded.spark, SparkState)
    assert loaded.spark == spark
    assert loaded.nodes == [] and loaded.bootstrap == ""


def test_a_folder_written_before_spark_loads_without_it(tmp_path):
    old = {"state_dir": str(tmp_path), "cluster_id": "cid", "nodes": [], "connect": None}
    (tmp_path / "stack.json").write_text(json.dumps(old))
    assert StackState.load(tmp_path).spark is None
