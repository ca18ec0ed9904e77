"""The status fold: newest wins per source, the controller's load before the routers', lag per stage."""

from __future__ import annotations

import math

import pytest

from ballast.control.state import initial_state
from ballast.metrics.records import ControllerStatus, LagSample, Metric, ReduceProgress, RouterKeyStats
from ballast.status.snapshot import StatusFold, max_over_mean
from ballast.status.view import headline, render

pytestmark = pytest.mark.unit


def lag(stage: str, partition: int, seconds: float, at: int) -> Metric:
    body = LagSample(group="g", topic="t", partition=partition, committed_offset=0, end_offset=0,
                     lag_records=0, lag_seconds=seconds, stage=stage, status="OK",
                     group_status="OK")  # fmt: skip
    return Metric("shedder", at - 1000, at, body)


def router(source: str, workers: list[int], at: int) -> Metric:
    body = RouterKeyStats(epoch=0, worker_records=workers, worker_bytes=[0] * len(workers), offered_records=0,
                          kept_records=0, heavy_hitters=[], sketch_capacity=0)  # fmt: skip
    return Metric(source, at - 1000, at, body)


def test_routers_load_is_summed_over_their_newest_intervals_until_a_controller_speaks() -> None:
    fold = StatusFold()
    fold.add([router("r1", [9, 9], 1000), router("r1", [3, 1], 2000), router("r2", [1, 3], 1500)])
    s = fold.status("p", 2)
    assert (s.worker_load, s.load_source, s.realized_imbalance) == ([4.0, 4.0], "routers", 1.0)
    status = ControllerStatus(controller="c", epoch=3, table_size=7, workers=2, realized_imbalance=1.5,
                              worker_load=[3.0, 1.0], migration_id="m1", migration_keys=4)  # fmt: skip
    fold.add([Metric("controller", 0, 2500, status)])
    s = fold.status("p", 2)
    seen = (s.worker_load, s.load_source, s.realized_imbalance, s.migration_keys)
    assert seen == ([3.0, 1.0], "controller", 1.5, 4)


def test_lag_per_stage_is_the_largest_partition_of_the_newest_samples_and_unknown_stays_unknown() -> None:
    fold = StatusFold()
    fold.add([lag("router", 0, 9.0, 1000), lag("router", 0, 1.0, 2000), lag("router", 1, 2.5, 2000),
              lag("reduce", 0, math.nan, 2000)])  # fmt: skip
    s = fold.status("p", 2)
    assert s.stage_lag("router") == 2.5  # the older 9 s of partition 0 was replaced
    assert s.stage_lag("reduce") is None


def test_lag_per_stage_leaves_out_a_partition_the_newest_cycle_did_not_sample() -> None:
    """A partition that left the shedder's measurement kept its old lag on screen: status showed
    9 s while the router group's every partition measured now was at 1 s."""
    fold = StatusFold()
    fold.add([lag("router", 0, 9.0, 1000), lag("router", 1, 1.0, 2000)])
    assert fold.status("p", 2).stage_lag("router") == 1.0


def test_epoch_keep_and_the_jobs_newest_batch_come_through_and_draw() -> None:
    fold = StatusFold()
    for batch, at in ((1, 1000), (2, 3000), (0, 500)):
        body = ReduceProgress(job="j", batch_id=batch, input_rows=batch * 10,
                              durations_ms={"triggerExecution": 7}, end_offsets=[])  # fmt: skip
        fold.add([Metric("j/driver", at - 1, at, body)])
    control = initial_state(2)
    s = fold.status("p", 2, control, results_written=12)
    assert [(j.batch_id, j.input_rows, j.duration_ms) for j in s.jobs] == [(2, 20, 7)]
    assert (s.epoch, s.results_written, s.measured_ms) == (0, 12, 3000)
    assert "12 results" in headline(s) and render(s) is not None


def test_max_over_mean_of_no_load_is_unknown() -> None:
    assert max_over_mean([]) is None and max_over_mean([0.0, 0.0]) is None
    assert max_over_mean([3.0, 1.0]) == 1.5


def test_the_scaling_loop_comes_through_the_codec_and_onto_the_screen() -> None:
    """A ``ControllerStatus`` with its scaling part, through the real Avro codec (the record the
    controller publishes), folded and drawn: instances, what DS2 found and the last decision."""
    from dataclasses import asdict

    from rich.console import Console

    from ballast.avro.codec import AvroCodec
    from ballast.metrics.records import ScalingStatus, metric_of, metrics_record

    rates = {"router": 2000.0, "reduce": 750.0}
    scaling = ScalingStatus("on", {"router": 2, "reduce": 4}, {"router": 2, "reduce": 5}, rates,
                            "reduce 1 -> 4 (APPLIED): 3 estimates")  # fmt: skip
    status = ControllerStatus(controller="c", epoch=3, table_size=0, workers=4, realized_imbalance=1.0,
                              scaling=scaling)  # fmt: skip
    codec = AvroCodec("io.ballast.MetricsRecord")
    raw = codec.decode(codec.encode(metrics_record("controller/c", 1, 2, "ControllerStatus", asdict(status))))
    metric = metric_of(raw)
    assert metric.body == status
    fold = StatusFold()
    fold.add([metric])
    s = fold.status("p", 4)
    assert s.scaling is not None and s.scaling["instances"] == {"router": 2, "reduce": 4}
    console = Console(width=160, record=True)
    console.print(render(s))
    text = console.export_text()
    assert "on: reduce 4 (needs 5, 750/s each)   router 2 (needs 2, 2,000/s each)" in text
    assert "reduce 1 -> 4 (APPLIED)" in text
    # a controller without the scaling loop (or from before it) shows no scaling line
    old = ControllerStatus(controller="c", epoch=3, table_size=0, workers=4, realized_imbalance=1.0)
    fold.add([Metric("controller/c", 2, 3, old)])
    assert fold.status("p", 4).scaling is None
