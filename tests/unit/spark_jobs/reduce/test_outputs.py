"""A worker step's outputs as Kafka rows: every row decodes with the shipped schemas."""

from __future__ import annotations

import numpy as np
import pytest

from ballast.avro.codec import AvroCodec
from spark_jobs.processors.batch import Results
from spark_jobs.processors.sampling import SamplingTerms
from spark_jobs.reduce.contract import ChunkOut, DeadLetter, StepResult
from spark_jobs.reduce.outputs import OUTPUT_SCHEMA, RESULT, OutputEncoder

TOPICS = {"output": "o", "routed": "r", "dead_letter": "d", "metrics": "m"}


def stats() -> dict:
    return {
        "worker": 3, "epoch": 2, "records": 10, "busy_ms": 12.5, "state_bytes": 100, "state_keys": 4,
        "frontier_epoch": 2, "watermark_ms": 1000, "step": 7, "spark_partition": 3, "late_records": 1,
        "held_records": 2, "pending_keys": 1, "duplicate_chunks": 0,
        "heavy_state": [{"key": "a", "bytes": 50}],
        "chunks_sent": [{"key": "a", "epoch": 2, "worker": 5, "bytes": 40}], "chunks_installed": [],
        "flow_latency_p50_ms": 3.0, "flow_latency_p99_ms": 9.0,
    }  # fmt: skip


def _results() -> Results:
    return Results(
        key=np.array(["k|1", "k:2"], dtype=object),
        window_start=np.array([0, 1000]),
        window_end=np.array([1000, 2000]),
        count=np.array([2, 0]),
        sum=np.array([3.0, 0.0]),
        min=np.array([1.0, np.inf]),
        max=np.array([2.0, -np.inf]),
        revision=np.array([0, 1], dtype=np.int32),
        excluded=np.array([0, 3]),
        values=[(1.0, 2.0), ()],
    )


def test_results_cross_as_columns_and_the_other_rows_decode() -> None:
    step = StepResult(
        results=_results(),
        chunks=[ChunkOut("a", 2, 3, 5, 0, 1, b"state")],
        dead=[DeadLetter(42, None, "late", "event_time 1 < watermark 2")],
        stats=stats(),
    )
    frame = OutputEncoder(TOPICS, worker=3, job="agg").frame(step, now_ms=5_000)
    assert list(frame.columns) == [c.strip().split(" ")[0] for c in OUTPUT_SCHEMA.split(",")]
    results = frame[frame.row_kind == RESULT]
    assert list(results.key) == [b"agg:0:1000:k|1", b"agg:1000:2000:k:2"]
    assert results.value.isna().all()  # Spark's to_avro encodes results from the r_ columns
    first, second = results.iloc[0], results.iloc[1]
    assert (first.r_count, first.r_sum, first.r_min, first.r_max, list(first.r_values)) == (
        2,
        3.0,
        1.0,
        2.0,
        [1.0, 2.0],
    )
    assert (first.r_worker, first.r_epoch, first.r_revision, first.r_excluded) == (3, 2, 0, 0)
    # an empty window (all its records excluded) has no min or max, and says what it excluded
    assert (
        np.isnan(second.r_min) and np.isnan(second.r_max) and (second.r_revision, second.r_excluded) == (1, 3)
    )
    rows = {r.topic: r for r in frame[frame.row_kind != RESULT].itertuples()}
    branch, chunk = AvroCodec("io.ballast.RoutedEnvelope").decode(rows["r"].value)["body"]
    assert branch == "io.ballast.StateChunk" and (chunk["key"], chunk["epoch"], chunk["job"]) == (
        "a",
        2,
        "agg",
    )
    assert rows["r"].partition == 5  # the new owner's routed partition
    # a data record's dead letter names its routed position; its bytes stay in the routed topic
    assert (rows["d"].value, rows["d"].reason, rows["d"].source_offset, rows["d"].source_partition) == (
        None, "late", 42, 3
    )  # fmt: skip
    metrics = AvroCodec("io.ballast.MetricsRecord").decode(rows["m"].value)
    assert metrics["source"] == "agg/worker-3" and metrics["body"][1]["chunks_sent"][0]["worker"] == 5


def test_a_step_without_results_has_the_same_columns() -> None:
    frame = OutputEncoder(TOPICS, worker=0, job="agg").frame(StepResult(stats=stats()), now_ms=1)
    assert list(frame.columns) == [c.strip().split(" ")[0] for c in OUTPUT_SCHEMA.split(",")]
    assert list(frame.topic) == ["m"]


def test_results_state_their_error_in_columns() -> None:
    """The first row nothing was shed from: exact, its estimates what it saw. The second: 2 of
    its 3 counted records kept with p = 1/2 (values 2 and 4). The third: a per-key processor's row
    built under shedding: no estimate (nulls), relative error infinite."""
    results = Results(
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
            var_sum=np.array([0.0, 2 * (4 + 16), 0.0]),
            opaque_keep=np.array([np.nan, np.nan, 0.5]),
        ),
    )
    frame = OutputEncoder(TOPICS, worker=1, job="agg").frame(StepResult(results=results, stats=stats()), 5)
    exact, shed, opaque = (frame.iloc[i] for i in range(3))
    assert (exact.r_exact, exact.r_sampled, exact.r_keep, exact.r_rel_error) == (True, 0, 1.0, 0.0)
    assert (exact.r_est_count, exact.r_count_low, exact.r_count_high) == (3.0, 3.0, 3.0)
    assert (exact.r_est_sum, exact.r_sum_low, exact.r_sum_high, exact.r_count_se) == (3.0, 3.0, 3.0, 0.0)
    t = 12.706204736  # one degree of freedom
    assert (shed.r_exact, shed.r_sampled, shed.r_est_count, shed.r_est_sum) == (False, 2, 5.0, 13.0)
    assert (shed.r_count_se, shed.r_keep, shed.r_rel_error) == (2.0, 3 / 5, 2 / 5)
    assert (shed.r_count_low, shed.r_count_high) == (3.0, 5 + 2 * t)
    assert shed.r_sum_high == pytest.approx(13 + t * np.sqrt(40))
    assert (opaque.r_exact, opaque.r_keep, opaque.r_est_count, np.isinf(opaque.r_rel_error)) == (
        False,
        0.5,
        1,
        True,
    )
    assert np.isnan([opaque.r_est_sum, opaque.r_count_se, opaque.r_count_low, opaque.r_sum_high]).all()
    others = frame[frame.row_kind != RESULT]  # not results: every estimate column null
    assert others.r_exact.isna().all() and others.r_est_count.isna().all() and others.r_sampled.isna().all()
