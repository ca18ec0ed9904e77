"""Acceptance 3 on a real broker: with two input streams of different priority under overload, the
lower one sheds first, and no stream ever goes below its minimum accuracy.

The pipeline: a consumer in the routers' group standing in for the routers (it keeps up, applies the
keep-probabilities of the control log and writes the kept records to the routed topic) and a reduce
job standing in for Spark (it reads the routed topic at a fixed capacity and publishes its
``ReduceProgress``), so the reduce is the bottleneck, as in the deployment the policy models. The
shedder and the controller run as processes. Ground truth is the whole control log, every SHEDDING
event read back; the arithmetic below is the plan the test expects, worked out by hand.

Phase 1 (1.5x): capacity 400/s; ``low`` offers 400/s (priority 0, minimum 0.1), ``high`` 200/s
(priority 1, minimum 0.5). The minimums take 40 + 100; ``high`` needs 100 more to be whole and the
budget (380/s less the drain of the backlog) leaves it that, so only ``low`` sheds.
Phase 2: ``high`` offers 900/s: the minimums alone (40 + 450) exceed the capacity, so both are
held at their minimums (CANNOT_HOLD), never below.
"""

from __future__ import annotations

import time

from ballast.waiting import wait_until
from tests.support.shedder_kit import Feeder, StandIn, StandInReduce, second_input, shedding_events

MIN_LOW, MIN_HIGH = 0.1, 0.5


def test_the_lower_priority_sheds_first_and_no_stream_goes_below_its_minimum(pipe):
    low, high = pipe.layout.name("input"), second_input(pipe.layout)
    pipe.start(pipe.controller("c1", rebalance=False))
    router = StandIn(pipe, [low, high], capacity=20_000, forward_to=pipe.layout.name("routed"))
    reduce = StandInReduce(pipe, "job-a", capacity=2_000)  # keeps up while the rates settle
    feeder = Feeder(pipe.kafka, {low: 400, high: 200})
    for thread in (router, reduce, feeder):
        thread.start()
    streams = (
        f"topic={low},target=4s,priority=0,min-accuracy={MIN_LOW}",
        f"topic={high},target=4s,priority=1,min-accuracy={MIN_HIGH}",
    )
    settings = {"cycle_s": 1, "sample_s": 0.25, "rate_tau_s": 2, "log_level": "info"}
    try:
        pipe.start(pipe.shedder(*streams, **settings))
        wait_until(lambda: reduce.processed > 0, 30, "the reduce reads")
        time.sleep(8)
        assert not shedding_events(pipe), "shed while the pipeline kept up"
        reduce.capacity = 400  # phase 1: 1.5x
        wait_until(lambda: any(e["payload"][1]["keep_probability"] < 1 for e in shedding_events(pipe)), 60,
                   "a shed")  # fmt: skip
        time.sleep(15)
        phase2_ms, said = int(time.time() * 1000), len(pipe.log("shedder"))
        feeder.rates[high] = 900  # phase 2: the minimums exceed the capacity
        wait_until(lambda: "CANNOT_HOLD" in pipe.log("shedder")[said:], 60, "the shedder says it cannot hold")
        time.sleep(10)
        pipe.check_running("shedder")
    finally:
        for thread in (feeder, router, reduce):
            thread.stop.set()
        for thread in (feeder, router, reduce):
            thread.join(30)
    assert router.error is None and reduce.error is None

    events = shedding_events(pipe)
    minimum = {low: MIN_LOW, high: MIN_HIGH}
    keep = {low: 1.0, high: 1.0}
    history = []
    for e in events:
        body = e["payload"][1]
        target, k = body["target"], body["keep_probability"]
        assert k >= minimum[target], f"epoch {e['epoch']}: {target} at {k} < its minimum {minimum[target]}"
        keep[target] = k
        history.append((e["issued_at"], dict(keep)))
    first_shed = next(e["payload"][1]["target"] for e in events if e["payload"][1]["keep_probability"] < 1)
    assert first_shed == low
    phase1 = [k for at, k in history if at < phase2_ms]
    assert phase1 and phase1[-1][low] < 1 and all(k[high] == 1.0 for k in phase1), phase1
    # phase 2: both held at their minimums at the end
    assert keep == {low: MIN_LOW, high: MIN_HIGH}, history[-5:]
    assert "CANNOT_HOLD" in pipe.log("shedder")
