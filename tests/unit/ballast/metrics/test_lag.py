"""A group's newest lag: one cycle of the shedder's samples, never a partition left behind by an older one."""

from __future__ import annotations

import math

from ballast.metrics.lag import NewestLag
from ballast.metrics.records import LagSample, Metric, ReduceProgress


def sample(at: int, partition: int, lag_s: float, status: str = "OK", group_status: str = "OK",
           group: str = "routers", stage: str = "router", source: str = "shedder-1") -> Metric:  # fmt: skip
    body = LagSample(group, "t", partition, 5, 9, 4, lag_s, stage, status, group_status, 10.0, 8.0)
    return Metric(source, at - 1000, at, body)


def test_a_partition_last_sampled_in_an_older_cycle_does_not_count():
    fold = NewestLag()
    fold.add([sample(1000, 0, 30.0), sample(1000, 1, 2.0), sample(2000, 1, 1.0)])
    (g,) = fold.groups()
    assert g.measured_ms == 2000 and [s.partition for s in g.samples] == [1]
    assert g.lag_seconds == 1.0  # partition 0's 30 s is from a cycle the shedder has moved past


def test_the_newest_sample_wins_whatever_order_they_arrive_in():
    fold = NewestLag()
    fold.add([sample(2000, 0, 1.0, source="shedder-2"), sample(1000, 0, 9.0)])
    (g,) = fold.groups()
    assert (g.lag_seconds, g.source) == (1.0, "shedder-2")


def test_lag_is_the_largest_known_and_the_status_the_worst():
    fold = NewestLag()
    fold.add([sample(2000, 0, 3.0, "WARN", "WARN"), sample(2000, 1, math.nan, "OK", "WARN"),
              sample(2000, 2, 0.5, "OK", "")])  # fmt: skip
    (g,) = fold.groups()
    assert g.lag_seconds == 3.0 and g.status == "WARN"
    fold = NewestLag()
    fold.add([sample(2000, 0, math.nan, "STALL", "")])  # no group status given: the partition's
    (g,) = fold.groups()
    assert math.isnan(g.lag_seconds) and g.status == "STALL"


def test_groups_come_routers_first_and_other_metrics_are_ignored():
    progress = ReduceProgress(job="j", batch_id=1, input_rows=0, durations_ms={}, end_offsets=[])
    fold = NewestLag()
    fold.add([sample(1000, 0, 1.0, group="job", stage="reduce"), sample(1000, 0, 2.0),
              Metric("driver", 0, 1000, progress)])  # fmt: skip
    assert [(g.stage, g.group) for g in fold.groups()] == [("router", "routers"), ("reduce", "job")]
    assert NewestLag().groups() == []
