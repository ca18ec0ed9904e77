"""Acceptance 1 on a real broker: the shedder's time lag within 10% (median) of the exact time lag,
for a group that commits offsets and for a reduce job known only by its ReduceProgress, under a
steady and then a step-changed input rate.

The exact lag of a sample is its measuring time (the ``LagSample``'s ``interval_end``) minus the
append time of the record at the sample's committed offset, read back from the broker: the test
writes every record with its CreateTime set to the moment it sends it (the stand-in router does the
same for the routed topic), so the timestamp is when the record entered the log, to a few ms.

The group is a consumer in the routers' group standing in for the routers (tests/support/shedder_kit.py:
a fixed capacity, commits every 0.5 s, kept records forwarded to the routed topic); the reduce is a
stand-in reading the routed topic at a fixed capacity and publishing ReduceProgress every second
(running Spark for this is heavy on 2 cores; the shedder cannot tell the difference: it reads only
the progress records). Input 250/s (the routers keep up at 300/s, the reduce at 200/s falls
behind), then 450/s (the routers fall behind too). The stream is declared with min-accuracy 1, so
nothing is shed and the lags grow as the input dictates.
"""

from __future__ import annotations

import math
import statistics
import time

from ballast.avro.codec import AvroCodec
from ballast.kafka.reading import read_topic
from ballast.metrics.records import LagSample, metric_of
from tests.support.shedder_kit import Feeder, StandIn, StandInReduce


def append_times(pipe, topic: str) -> dict[tuple[int, int], int]:
    """(partition, offset) -> the record's timestamp (ms), every record of ``topic``."""
    return {(m.partition(), m.offset()): m.timestamp()[1] for m in read_topic(pipe.kafka, topic, idle=2.0,
                                                                               timeout=120)}  # fmt: skip


def test_time_lag_estimates_are_within_ten_percent_of_the_exact_lag(pipe):
    topic, routed = pipe.layout.name("input"), pipe.layout.name("routed")
    router = StandIn(pipe, [topic], capacity=300, forward_to=routed)
    reduce = StandInReduce(pipe, "job-a", capacity=200)
    feeder = Feeder(pipe.kafka, {topic: 250})
    for thread in (router, reduce, feeder):
        thread.start()
    settings = {"cycle_s": 1, "sample_s": 0.5, "metrics_from": "earliest", "dry_run": True}
    try:
        pipe.start(pipe.shedder(f"topic={topic},target=1h,min-accuracy=1", **settings))
        time.sleep(25)
        feeder.rates[topic] = 450  # the step: the routers fall behind too
        time.sleep(20)
        pipe.check_running("shedder")
    finally:
        for thread in (feeder, router, reduce):
            thread.stop.set()
        for thread in (feeder, router, reduce):
            thread.join(30)
    assert router.error is None and reduce.error is None
    pipe.stop("shedder")

    times = {topic: append_times(pipe, topic), routed: append_times(pipe, routed)}
    codec = AvroCodec("io.ballast.MetricsRecord")
    errors: dict[str, list[float]] = {"router": [], "reduce": []}
    exact_lags: dict[str, list[float]] = {"router": [], "reduce": []}
    for m in read_topic(pipe.kafka, pipe.layout.name("metrics"), idle=2.0, timeout=120):
        try:
            metric = metric_of(codec.decode(m.value()))
        except Exception:
            continue
        s = metric.body
        if not isinstance(s, LagSample) or s.committed_offset < 0 or math.isnan(s.lag_seconds):
            continue
        appended = times[s.topic].get((s.partition, s.committed_offset))
        if s.committed_offset >= s.end_offset or appended is None:
            continue  # caught up (or the record is past what the sample saw): no lag to compare
        exact = (metric.interval_end - appended) / 1000.0
        if exact < 1.0:
            continue  # under the commit and sampling intervals: docs/shedder.md, "Accuracy"
        exact_lags[s.stage].append(exact)
        errors[s.stage].append(abs(s.lag_seconds - exact) / exact)
    for stage in ("router", "reduce"):
        assert len(errors[stage]) >= 10, (stage, len(errors[stage]))
        median = statistics.median(errors[stage])
        print(f"{stage}: {len(errors[stage])} samples, exact lags {min(exact_lags[stage]):.1f}-"
              f"{max(exact_lags[stage]):.1f} s, median error {median:.1%}, "
              f"p90 {statistics.quantiles(errors[stage], n=10)[-1]:.1%}")  # fmt: skip
        assert median <= 0.10, (stage, median)
