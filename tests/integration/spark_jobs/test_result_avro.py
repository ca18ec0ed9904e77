"""Results cross from a worker to the output topic's bytes the way the job sends them: the worker's
pandas frame through Spark's Arrow path (a ``mapInPandas`` over the job's output schema, the same
serializer the stateful operator's output takes), then the job's ``to_avro`` expression. The bytes
decode with Ballast's codec into the fields the worker computed, the estimates under shedding
included (a NaN estimate arrives as null; an exact row's min and max are no bounds)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ballast.avro.codec import AvroCodec
from spark_jobs.processors.batch import Results
from spark_jobs.processors.sampling import SamplingTerms, estimate
from spark_jobs.reduce.contract import StepResult
from spark_jobs.reduce.job import result_value
from spark_jobs.reduce.outputs import OUTPUT_SCHEMA, RESULT, OutputEncoder

TOPICS = {"output": "o", "routed": "r", "dead_letter": "d", "metrics": "m"}
STATS = {
    "worker": 1, "epoch": 2, "records": 3, "busy_ms": 1.0, "state_bytes": 0, "state_keys": 0,
    "frontier_epoch": 2, "watermark_ms": 0, "step": 1, "spark_partition": 1, "late_records": 0,
    "held_records": 0, "pending_keys": 0, "duplicate_chunks": 0, "heavy_state": [], "chunks_sent": [],
    "chunks_installed": [], "flow_latency_p50_ms": 0.0, "flow_latency_p99_ms": 0.0,
}  # fmt: skip


@pytest.fixture(scope="module")
def spark():
    from spark_jobs.session import local_spark

    session = local_spark("ballast-test-result-avro", shuffle_partitions=1)
    yield session
    session.stop()


def _results() -> Results:
    """An exact row, a row 2 of whose records were kept with p = 1/2, a per-key processor's row
    built under shedding (no estimate possible)."""
    return Results(
        key=np.array(["a", "b", "c"], dtype=object),
        window_start=np.zeros(3, dtype=np.int64),
        window_end=np.full(3, 1000),
        count=np.array([2, 3, 1]),
        sum=np.array([3.0, 7.0, 5.0]),
        min=np.array([1.0, 1.0, 5.0]),
        max=np.array([2.0, 4.0, 5.0]),
        revision=np.zeros(3, dtype=np.int32),
        excluded=np.array([1, 0, 0]),
        terms=SamplingTerms(
            sampled=np.array([0, 2, 0]),
            count=np.array([0.0, 2.0, 0.0]),
            sum=np.array([0.0, 6.0, 0.0]),
            var_count=np.array([0.0, 4.0, 0.0]),
            var_sum=np.array([0.0, 40.0, 0.0]),
            opaque_keep=np.array([np.nan, np.nan, 0.5]),
        ),
    )


def test_estimates_reach_the_output_bytes(spark) -> None:
    results = _results()
    frame = OutputEncoder(TOPICS, worker=1, job="agg").frame(StepResult(results=results, stats=STATS), 5)

    def batches(_iterator):
        yield frame

    out = spark.range(1).mapInPandas(batches, schema=OUTPUT_SCHEMA)
    values = [
        bytes(r["value"])
        for r in out.where(out.row_kind == RESULT).select(result_value("agg").alias("value")).collect()
    ]
    codec = AvroCodec("io.ballast.OutputResult")
    rows = {r["key"]: r for r in (codec.decode(v) for v in values)}
    est = estimate(results.count, results.sum, results.excluded, results.terms)

    exact, shed, opaque = rows["a"], rows["b"], rows["c"]
    assert (exact["exact"], exact["min_max_are_bounds"], exact["sampled_records"]) == (True, False, 0)
    assert (exact["estimated_count"], exact["estimated_sum"], exact["relative_error"]) == (3.0, 3.0, 0.0)
    assert (exact["count_low"], exact["count_high"], exact["sum_low"], exact["sum_high"]) == (
        3.0,
        3.0,
        3.0,
        3.0,
    )
    assert (shed["exact"], shed["min_max_are_bounds"], shed["sampled_records"]) == (False, True, 2)
    for field, name in (
        ("keep_probability", "keep_probability"),
        ("estimated_count", "estimated_count"),
        ("estimated_sum", "estimated_sum"),
        ("count_std_error", "count_std_error"),
        ("sum_std_error", "sum_std_error"),
        ("count_low", "count_low"),
        ("count_high", "count_high"),
        ("sum_low", "sum_low"),
        ("sum_high", "sum_high"),
        ("relative_error", "relative_error"),
    ):
        assert shed[name] == getattr(est, field)[1], name
    assert (opaque["exact"], opaque["min_max_are_bounds"], opaque["keep_probability"]) == (False, True, 0.5)
    assert math.isinf(opaque["relative_error"]) and opaque["estimated_count"] == 1.0
    assert [opaque[f] for f in ("estimated_sum", "count_std_error", "count_low", "sum_high")] == [None] * 4
