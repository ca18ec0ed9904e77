"""A task that fails once for a reason of the moment is tried again in the local Spark the reduce
runs in, instead of failing the query (the fault campaign's seed 5: "Python worker failed to
connect back" on a loaded machine ended the reduce). Plain ``local[N]`` tries a task once: this
test failed with it (the job's exception names the task's first attempt)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.integration


def test_a_python_task_that_fails_on_its_first_attempt_is_retried(tmp_path) -> None:
    from pyspark import TaskContext

    from spark_jobs.session import local_spark

    spark = local_spark("ballast-test-retry", shuffle_partitions=2)

    def flaky(rows):
        context = TaskContext.get()
        if context is not None and context.attemptNumber() == 0:
            raise RuntimeError("a failure of the moment (first attempt)")
        yield sum(1 for _ in rows)

    counts = spark.sparkContext.parallelize(range(1_000), 4).mapPartitions(flaky).collect()
    assert sum(counts) == 1_000
