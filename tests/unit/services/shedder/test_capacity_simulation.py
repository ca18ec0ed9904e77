"""The policy driving a simulated micro-batch reduce through an overload: acceptance 2 and 6 of the
shedding issue without a broker, on a pipeline no gentler than the benchmark's.

The reduce is Spark's micro-batch loop with stalls (:class:`tests.support.micro_batch.MicroBatchReduce`):
its lag is a saw-tooth even when it keeps up, and rises two cycles in a row now and then without
any overload. A ``SHEDDING`` setting reaches the routers half a second after the decision; the
driver measures what the service would (offered rate, records processed per second smoothed over
10 s, the lag and its trend, the reduce's rows per busy second) and asks the policy every 5 s.

What failed before the capacity was measured from the batches' busy time: the processing rate
under shedding was read as the capacity whenever the saw-tooth rose two cycles in a row, so the
shed ratcheted down and was not lifted after the overload (the benchmark's acceptance 6).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import pytest

from services.shedder.capacity import CostModel, job_capacity
from services.shedder.config import PolicySettings, StreamDeclaration
from services.shedder.observations import trend_of
from services.shedder.policy import Observation, SheddingPolicy
from tests.support.micro_batch import MicroBatchReduce

pytestmark = pytest.mark.unit

TOPIC = "input"
CAPACITY = 1200.0  # records per busy second of the simulated reduce, at large batches
CYCLE_S = 5.0
TARGET_S = 30.0
MIN_ACCURACY = 0.2
DT = 0.05


@dataclass
class Run:
    times: list[float]
    keeps: list[float]
    lags: list[float]
    overload: tuple[float, float]


def simulate(
    seed: int, measured: bool, warm_s: float = 60.0, over_s: float = 180.0, calm_s: float = 120.0
) -> Run:
    """0.5x capacity, 2x, 0.5x; the policy every cycle, with the capacity measured or inferred."""
    rng = random.Random(seed)
    reduce = MicroBatchReduce(rng, CAPACITY)
    stream = StreamDeclaration(TOPIC, target_s=TARGET_S, priority=0, min_accuracy=MIN_ACCURACY)
    policy = SheddingPolicy(PolicySettings(cycle_s=CYCLE_S), [stream])
    keep, pending = 1.0, []  # pending: (applies at, keep)
    offered, processed_at_cycle = 0.0, 0.0
    service, previous_lag = None, None
    model: CostModel | None = None
    run = Run([], [], [], (warm_s, warm_s + over_s))
    steps = int((warm_s + over_s + calm_s) / DT)
    for i in range(1, steps + 1):
        now = i * DT
        rate = 2.0 * CAPACITY if warm_s <= now < warm_s + over_s else 0.5 * CAPACITY
        while pending and pending[0][0] <= now:
            keep = pending.pop(0)[1]
        offered += rate * DT
        reduce.queue.append([now, rate * DT * keep])
        reduce.step(now)
        if i % round(CYCLE_S / DT):
            continue
        lag = reduce.lag_s(now)
        trend = trend_of(lag, previous_lag, 1.0)
        previous_lag = lag
        per_cycle = (reduce.processed - processed_at_cycle) / CYCLE_S
        processed_at_cycle = reduce.processed
        service = per_cycle if service is None else service + (per_cycle - service) * (1 - math.exp(-0.5))
        arrival = offered / CYCLE_S
        offered = 0.0
        capacity = None
        if measured:
            capacity, model = job_capacity(reduce.batches, now, 60.0, CYCLE_S, model)
        obs = {TOPIC: Observation(keep, lag, trend, arrival, reduce.backlog())}
        decision = policy.decide(obs, service, CYCLE_S, capacity)
        if TOPIC in decision.changes:
            pending.append((now + 0.5, decision.changes[TOPIC]))
        run.times.append(now)
        run.keeps.append(decision.streams[TOPIC].keep)
        run.lags.append(lag)
    return run


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5, 6])
def test_shedding_holds_the_target_and_lifts_within_three_cycles_of_the_overloads_end(seed: int) -> None:
    run = simulate(seed, measured=True)
    start, end = run.overload
    before = [k for t, k in zip(run.times, run.keeps, strict=True) if t < start]
    assert before and min(before) == 1.0, f"shed before the overload: {before}"
    assert min(run.keeps) >= MIN_ACCURACY
    assert min(run.keeps) < 1.0, "the overload was never shed"
    # acceptance 2: every stretch of lag above the target ends within 3 cycles
    above = 0
    for t, lag in zip(run.times, run.lags, strict=True):
        above = above + 1 if lag > TARGET_S else 0
        assert above <= 3, f"lag above the target for more than 3 cycles at {t:.0f} s: {lag:.1f} s"
    # acceptance 6: back at 1 within 3 cycles of the overload's end, and stays there
    after = [k for t, k in zip(run.times, run.keeps, strict=True) if t >= end + 3 * CYCLE_S]
    assert after and min(after) == 1.0, f"not lifted within 3 cycles: {after[:6]}"
