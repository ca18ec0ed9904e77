"""Acceptance 1 and 2 of the reduce on a real Spark standalone cluster (a master and two workers
on loopback, ``ballast stack up --spark``'s code), the job handed over by ``ballast reduce submit``.

The same live run as tests/e2e/test_reduce.py (300,000 events, three routing updates moving 26
keys, the hottest twice, ``SCALE`` 8 -> 6 -> 8), and while it runs: the driver is killed (-9, its
whole process group: spark-submit's JVM and the Python driver) mid-migration *and mid-batch*: the
moment a worker has written its part of a micro-batch (its stats record) while a new owner holds
records of a key whose state has not arrived, so the batch is not committed; it is submitted again
on the same checkpoint. Later a router is killed (-9) mid-migration and restarted with the same id.
Every row must still be exact or a correction ending exact: the replayed micro-batch rewrites its
chunks and results, and the chunks are applied once. The replay must show (a worker's step
written twice): a kill on a clean batch boundary would pass the same way without testing it.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict

from ballast.workload import FLUSH_KEY
from tests.e2e.test_reduce import AGG, EVENTS, live_run
from tests.support import reduce_reference
from tests.support.output_judge import assert_rows_right, judge
from tests.support.reduce_kit import WORKERS, ReduceKit, reduce_events


def test_cluster_run_with_driver_and_router_killed_mid_migration_is_exact(
    kafka_config, spark_cluster, tmp_path_factory
) -> None:
    master = spark_cluster.spark.master_url
    workdir = tmp_path_factory.mktemp("cluster")
    kit = ReduceKit(kafka_config, f"cluster-{workdir.name}", workdir)
    events = reduce_events(EVENTS, seed=23)
    killed: dict[str, object] = {}

    def during(kit: ReduceKit, step: int, epoch: int) -> None:
        if step == 1:
            killed["driver"] = kit.kill_job_mid_batch(
                "agg", lambda s: s.pending_keys > 0 and s.epoch >= epoch
            )
            time.sleep(1.0)
            kit.restart_job("agg")
        elif step == 2:
            kit.wait_stats("agg", lambda s: s.epoch >= epoch, timeout=300)
            kit.restart_router("r1")
            killed["router"] = epoch

    try:
        run = live_run(kit, events, "agg", AGG, during, master=master)
        expected = reduce_reference.expected_aggregates(events, 4000, 2000)
        kit.wait_results("agg", expected, timeout=900)
        late = kit.left_out("agg", restarts=1)  # a router behind by more than the delay: counted, not lost
        counted = reduce_reference.expected_aggregates(
            [e for i, e in enumerate(events) if i not in late], 4000, 2000
        )
        assert_rows_right(judge(kit.rows("agg"), counted, expected, ignore_keys=[FLUSH_KEY]))
        assert set(killed) == {"driver", "router"}
        stats = kit.worker_stats("agg")
        steps = Counter((s.worker, s.step) for s in stats)
        replayed = [ws for ws, n in steps.items() if n > 1]
        assert replayed, "no worker step was written twice: the kill did not land inside a batch"
        trigger = killed["driver"]
        assert (trigger.worker, trigger.step) in replayed  # the step that was written before the kill
        installed = {(c.key, c.epoch) for s in stats for c in s.chunks_installed}
        assert {(k, e) for e, pins in run["updates"] for k in pins} <= installed
        placed = defaultdict(set)
        for s in stats:
            placed[s.worker].add(s.spark_partition)
        assert dict(placed) == {w: {w} for w in range(WORKERS)}
        log = kit.job_log("agg").read_text(errors="replace")
        assert master in log  # the driver ran against the cluster, not a local master
    finally:
        kit.close()
