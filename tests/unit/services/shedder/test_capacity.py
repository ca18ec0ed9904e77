"""The reduce's capacity from its batches' rows and busy time (services/shedder/capacity.py), and the
service's use of it: measured from every ``ReduceProgress``, and no decision while it is unknown."""

from __future__ import annotations

import math

import pytest

from ballast.avro.codec import AvroCodec
from ballast.kafka.configuration import KafkaConfig
from ballast.kafka.topics import TopicLayout
from ballast.metrics.records import metrics_record
from services.shedder.capacity import (
    BatchCost,
    CostModel,
    batch_cost,
    busy_rate,
    fit_cost,
    job_capacity,
    pipeline_capacity,
    with_batch,
)
from services.shedder.config import PolicySettings, ShedderSettings, StreamDeclaration
from services.shedder.service import Shedder

pytestmark = pytest.mark.unit


def test_a_batch_without_a_duration_teaches_nothing():
    assert batch_cost(3, 100, {"addBatch": 40}, 1.0) is None
    assert batch_cost(3, 100, {"triggerExecution": 0}, 1.0) is None
    assert batch_cost(3, 100, {"triggerExecution": 250}, 1.0) == BatchCost(3, 100, 0.25, 1.0)


def test_history_replaces_a_replayed_batch_and_forgets_old_ones():
    h: tuple[BatchCost, ...] = ()
    h = with_batch(h, BatchCost(1, 100, 1.0, 0.0), 60.0)
    h = with_batch(h, BatchCost(2, 100, 1.0, 30.0), 60.0)
    h = with_batch(h, BatchCost(2, 300, 1.0, 31.0), 60.0)  # the same batch again, after a restart
    assert [(b.batch_id, b.rows) for b in h] == [(1, 100), (2, 300)]
    h = with_batch(h, BatchCost(3, 100, 1.0, 61.0), 60.0)
    assert [b.batch_id for b in h] == [2, 3]


def test_busy_rate_is_rows_over_busy_seconds_in_the_window_without_empty_batches():
    h = (BatchCost(1, 1000, 2.0, 0.0), BatchCost(2, 600, 1.0, 50.0), BatchCost(3, 0, 0.5, 55.0))
    assert busy_rate(h, 56.0, 60.0) == pytest.approx(1600 / 3.0)
    assert busy_rate(h, 70.0, 60.0) == pytest.approx(600)  # batch 1 is older than the window
    assert busy_rate(h[2:], 56.0, 60.0) is None  # only an empty batch: not measured
    assert busy_rate((), 0.0, 60.0) is None


def test_the_pipeline_is_as_fast_as_its_slowest_job_and_unknown_while_one_is():
    assert pipeline_capacity([900.0, 1200.0]) == 900.0
    assert pipeline_capacity([900.0, None]) is None
    assert pipeline_capacity([]) is None


def _progress(codec: AvroCodec, job: str, batch_id: int, rows: int, busy_ms: int) -> bytes:
    body = {
        "job": job,
        "batch_id": batch_id,
        "input_rows": rows,
        "durations_ms": {"triggerExecution": busy_ms, "addBatch": busy_ms - 10},
        "end_offsets": [rows * batch_id],
    }
    return codec.encode(metrics_record(f"{job}/driver", 0, busy_ms, "ReduceProgress", body))


def test_the_service_measures_each_jobs_capacity_from_its_progress_records():
    settings = ShedderSettings(reduce_jobs="a,b")
    streams = [StreamDeclaration("in", target_s=30.0, priority=0, min_accuracy=0.2)]
    shedder = Shedder(KafkaConfig(), TopicLayout("t"), settings, PolicySettings(), streams)
    codec = AvroCodec("io.ballast.MetricsRecord")
    for batch in (1, 2):
        shedder.on_metric(_progress(codec, "a", batch, 2000, 2000))
    shedder.on_metric(b"not avro")  # counted, skipped
    shedder.on_metric(_progress(codec, "c", 1, 10, 1000))  # not a job of ours
    now = max(at for _p, at in shedder.progress.values())
    assert shedder.capacity(now, ["a"]) is None  # two batches: not yet measured
    shedder.on_metric(_progress(codec, "a", 3, 2000, 2000))
    assert shedder.capacity(now, ["a"]) == pytest.approx(1000.0)
    assert shedder.capacity(now, ["a", "b"]) is None  # b not measured: no decision yet
    for batch in (7, 8, 9):
        shedder.on_metric(_progress(codec, "b", batch, 1500, 2500))
    assert shedder.capacity(now, ["a", "b"]) == pytest.approx(600.0)
    assert shedder.undecodable == 1 and "c" not in shedder.batches


def test_a_start_up_batch_is_left_out_once_there_are_enough_to_tell():
    # the first batches of the benchmark's reduce: 5 rows in 8.4 s (the query's start), then normal
    first = (BatchCost(0, 5, 8.405, 8.4), BatchCost(1, 571, 2.733, 11.1), BatchCost(2, 2276, 2.499, 13.6))
    assert job_capacity(first[:2], 11.1, 60.0, 5.0, None) == (None, None)  # too few to say
    assert busy_rate(first, 13.6, 60.0) == pytest.approx((571 + 2276) / (2.733 + 2.499))
    stalled = _batches(0.9, 1 / 1500, [1000, 1100, 900, 1000], stalls={1: 4.0})
    assert busy_rate(stalled, 4.0, 60.0) == pytest.approx(2900 / (3 * 0.9 + 2900 / 1500))


def _batches(fixed_s: float, per_row_s: float, sizes: list[int], stalls: dict[int, float] | None = None):
    stalls = stalls or {}
    return tuple(
        BatchCost(i, n, fixed_s + per_row_s * n + stalls.get(i, 0.0), float(i)) for i, n in enumerate(sizes)
    )


def test_the_fit_splits_a_batchs_fixed_cost_from_its_rows_cost_despite_stalled_batches():
    sizes = [200, 400, 1000, 2000, 3000, 500, 800, 1500, 2500, 300]
    h = _batches(0.9, 1 / 1500, sizes, stalls={2: 6.0, 7: 4.0})  # two batches stalled by seconds
    model = fit_cost(h, 10.0, 60.0)
    assert model is not None
    assert model.fixed_s == pytest.approx(0.9, abs=0.05)
    assert 1 / model.per_row_s == pytest.approx(1500, rel=0.05)
    # at 5 s batches: (5 - 0.9) / 5 of the per-row rate
    assert model.rate_at(5.0) == pytest.approx(4.1 / 5 * 1500, rel=0.06)


def test_batches_of_one_size_fit_nothing_and_the_last_good_fit_is_kept():
    steady = _batches(0.9, 1 / 1500, [1000, 1020, 990, 1010, 1005])
    assert fit_cost(steady, 5.0, 60.0) is None
    remembered = CostModel(0.9, 1 / 1500)
    capacity, model = job_capacity(steady, 5.0, 60.0, 5.0, remembered)
    assert model == remembered and capacity == pytest.approx(remembered.rate_at(5.0))
    capacity, model = job_capacity(steady, 5.0, 60.0, 5.0, None)  # nothing to go on: the plain ratio
    assert model is None and capacity == pytest.approx(busy_rate(steady, 5.0, 60.0))


def test_the_capacity_is_never_below_what_the_reduce_was_seen_to_process():
    # a fit that under-reads (rows of very different cost) is raised to the observed ratio
    big = _batches(0.1, 1 / 5000, [4000, 5000, 6000])
    low = CostModel(2.0, 1 / 500)
    capacity, _ = job_capacity(big, 3.0, 60.0, 5.0, low)
    assert capacity is not None and capacity >= (busy_rate(big, 3.0, 60.0) or math.inf)
    assert capacity > low.rate_at(5.0)


def test_an_idle_window_keeps_the_last_good_fit_and_knows_nothing_without_one():
    remembered = CostModel(0.9, 1 / 1500)
    assert job_capacity((), 100.0, 60.0, 5.0, remembered) == (remembered.rate_at(5.0), remembered)
    assert job_capacity((), 100.0, 60.0, 5.0, None) == (None, None)


def test_a_fit_whose_fixed_cost_exceeds_the_batch_target_never_reads_as_no_capacity():
    """Found by the fault campaign (seed 4): a reduce restarted on a loaded machine ran batches of
    20-37 s; the fit's fixed cost (clipped to the shortest batch) exceeded the 5 s batch target, so
    ``rate_at`` was 0. With fewer batches than a fit needs in the window the service took that 0 as
    the capacity, and every cycle failed in the policy ("capacity must be a finite number > 0"): no
    decision, no lag sample, a shed at 0.3 never lifted. A capacity is never 0: it is at least what
    the job was seen to process, and unknown (no decision) when nothing was seen."""
    slow = CostModel(fixed_s=21.0, per_row_s=1 / 2000)
    assert slow.rate_at(5.0) == 0.0  # the target cannot be met: not a capacity of 0
    one = [BatchCost(11, 2_075, 32.7, 99.0)]  # one batch in the window: too few to fit
    capacity, model = job_capacity(one, 100.0, 60.0, 5.0, slow)
    assert model == slow and capacity == pytest.approx(2_075 / 32.7)
    assert job_capacity((), 100.0, 60.0, 5.0, slow) == (None, slow)  # idle: nothing seen, unknown
    assert pipeline_capacity([0.0, 10.0]) is None  # a 0 from anywhere is no measurement
