"""Acceptance 1 and 2 of the reduce on a real Spark standalone cluster (a master and two workers
on loopback, ``ballast stack up --spark``'s code), the job handed over by ``ballast reduce submit``.

The same live run as tests/e2e/test_reduce.py (300,000 events, three routing updates moving 26
keys, the hottest twice), and while it runs: the driver is killed (-9, its whole process group:
spark-submit's JVM and the Python driver) mid-migration, once a new owner holds records of a key
whose state has not arrived, and is submitted again on the same checkpoint; later a router is
killed (-9) mid-migration and restarted with the same id. The results must still equal the
single-process reference exactly: a replayed micro-batch rewrites its chunks and results, and the
chunks are applied once.
"""

from __future__ import annotations

from collections import defaultdict

from tests.e2e.test_reduce import AGG, EVENTS, live_run, same
from tests.support import reduce_reference
from tests.support.reduce_kit import WORKERS, ReduceKit, reduce_events


def test_cluster_run_with_driver_and_router_killed_mid_migration_is_exact(
    kafka_config, spark_cluster, tmp_path_factory
) -> None:
    master = spark_cluster.spark.master_url
    workdir = tmp_path_factory.mktemp("cluster")
    kit = ReduceKit(kafka_config, f"cluster-{workdir.name}", workdir)
    events = reduce_events(EVENTS, seed=23)
    killed: dict[str, int] = {}

    def during(kit: ReduceKit, step: int, epoch: int) -> None:
        if step == 1:
            # mid-migration: a new owner holds records of a moved key whose chunk has not arrived
            kit.wait_stats("agg", lambda s: s.pending_keys > 0 and s.epoch >= epoch, timeout=300)
            kit.restart_job("agg")
            killed["driver"] = epoch
        elif step == 2:
            kit.wait_stats("agg", lambda s: s.epoch >= epoch, timeout=300)
            kit.restart_router("r1")
            killed["router"] = epoch

    try:
        run = live_run(kit, events, "agg", AGG, during, master=master)
        expected = reduce_reference.expected_aggregates(events, 4000, 2000)
        results = kit.wait_results("agg", expected, timeout=900)
        wrong = [k for k in expected if not same(results[k], expected[k])]
        assert not wrong, f"{len(wrong)} windows differ, e.g. {wrong[:3]}"
        assert set(killed) == {"driver", "router"}
        stats = kit.worker_stats("agg")
        installed = {(c.key, c.epoch) for s in stats for c in s.chunks_installed}
        assert {(k, e) for e, pins in run["updates"] for k in pins} <= installed
        placed = defaultdict(set)
        for s in stats:
            placed[s.worker].add(s.spark_partition)
        assert dict(placed) == {w: {w} for w in range(WORKERS)}
        assert kit.dead_letters() == []
        log = kit.job_log("agg").read_text(errors="replace")
        assert master in log  # the driver ran against the cluster, not a local master
    finally:
        kit.close()
