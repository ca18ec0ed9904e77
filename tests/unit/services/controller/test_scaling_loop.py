"""The controller's scaling loop on metrics as the services publish them: router intervals with
useful time, the reduce's batches, the shedder's lag samples. The expected counts are worked out
by hand from the numbers fed in, not from the code under test."""

from __future__ import annotations

import pytest

from ballast.control.state import fold, initial_state, make_event, shedding
from ballast.metrics.records import LagSample, ReduceProgress, RouterKeyStats, WorkerStats
from services.controller.scaling.decisions import DecisionSettings
from services.controller.scaling.loop import ScalingLoop, ScalingSettings
from services.controller.scaling.replay import replay

pytestmark = pytest.mark.unit

ROUTED, INPUT_PARTITIONS = 8, 4
# a router that routes 5,000 records in 2.5 useful seconds of a 10 s interval: 2,000/s true rate
ROUTER_OFFERED, ROUTER_USEFUL_MS = 5_000, 2_500
# reduce batches: 0.5 s fixed + 1 ms per row per worker; at a 2 s trigger a worker carries
# (2 - 0.5) / (0.001 * 2) = 750 rows/s
FIXED_S, ROW_S, TRIGGER_S = 0.5, 0.001, 2.0


def router_stats(
    offered: int = ROUTER_OFFERED,
    useful_ms: int | None = ROUTER_USEFUL_MS,
    kept: int | None = None,
    dead: int = 0,
) -> RouterKeyStats:
    """``kept`` below ``offered - dead``: the router shed the rest."""
    kept = offered - dead if kept is None else kept
    return RouterKeyStats.of({
        "epoch": 0, "worker_records": [kept], "worker_bytes": [0], "offered_records": offered,
        "kept_records": kept, "dead_lettered": dead, "heavy_hitters": [], "sketch_capacity": 10,
        "useful_ms": useful_ms,
    })  # fmt: skip


def batch(i: int, rows: int, workers: int) -> ReduceProgress:
    ms = round((FIXED_S + rows * ROW_S / workers) * 1000)
    return ReduceProgress.of({"job": "j", "batch_id": i, "input_rows": rows,
                              "durations_ms": {"triggerExecution": ms}, "end_offsets": []})  # fmt: skip


def lag(arrival: float, backlog: int = 0, stage: str = "router") -> LagSample:
    return LagSample.of({"group": "g", "topic": "in", "partition": 0, "committed_offset": 0, "end_offset": 0,
                         "lag_records": backlog, "lag_seconds": 0.0, "stage": stage, "arrival_rate": arrival})


def feed(loop: ScalingLoop, now: float, arrival: float, workers: int) -> None:
    loop.observe(now, "router-0", int(now * 1000) - 10_000, int(now * 1000), router_stats(), workers)
    for i, rows in enumerate((1000, 2000, 3000, 4000, 5000, 6000)):
        loop.observe(now, "reduce", 0, 0, batch(i, rows, workers), workers)
    loop.observe(now, "shedder", 0, 0, lag(arrival), workers)


def make_loop(mode: str = "on", actuator: bool = True, **decisions) -> ScalingLoop:
    d = DecisionSettings(**{"warmup": 0, "activation": 3, "scale_down_delay_s": 60.0, **decisions})
    settings = ScalingSettings(mode=mode, interval_s=10.0, catch_up_s=60.0, reduce_trigger_s=TRIGGER_S,
                               router_actuator=actuator, decisions=d)  # fmt: skip
    return ScalingLoop(settings, routers=1, reduce_workers=1, input_partitions=INPUT_PARTITIONS,
                       routed_partitions=ROUTED)  # fmt: skip


def run(loop: ScalingLoop, evaluations: int, arrival: float, migrating: bool = False):
    log = [make_event(0, "TABLE_SNAPSHOT", {"num_workers": 1, "table": {}, "routed_partitions": ROUTED})]
    state = fold(initial_state(ROUTED, 1), log)
    evals = []
    for k in range(evaluations):
        now = 10.0 * (k + 1)
        feed(loop, now, arrival, state.num_workers)
        ev = loop.evaluate(now, state, migrating=migrating)
        for etype, body in ev.events:
            log.append(make_event(len(log), etype, body))
        state = fold(initial_state(ROUTED, 1), log)  # the real fold takes every event the loop wrote
        evals.append(ev)
    return evals, log, state


def test_a_3000_per_s_input_asks_for_2_routers_and_4_workers_after_activation():
    loop = make_loop()
    evals, log, state = run(loop, 3, arrival=3000.0)
    first = evals[0].estimates
    assert first["router"].true_rate_per_instance == pytest.approx(2000.0, rel=0.01)
    assert first["router"].optimal == 2  # 3000 / 2000 = 1.5
    assert first["reduce"].true_rate_per_instance == pytest.approx(750.0, rel=0.02)
    assert first["reduce"].optimal == 4  # 3000 / 750
    assert evals[0].decisions == [] and evals[1].decisions == []  # activation: 3 estimates
    assert {(d.stage, d.before, d.after) for d in evals[2].decisions} == {("router", 1, 2), ("reduce", 1, 4)}
    assert [e["type"] for e in log[1:]].count("SCALE") == 1
    assert state.num_workers == 4
    assert replay(log, {"router": 1, "reduce": 1}).counts == {"router": 2, "reduce": 4}


def test_a_backlog_adds_its_catch_up_rate():
    loop = make_loop()
    feed(loop, 10.0, 0.0, 1)
    loop.observe(10.0, "shedder", 0, 0, lag(1500.0, backlog=180_000), 1)  # + 180,000 / 60 s = 3,000/s
    ev = loop.evaluate(10.0, fold(initial_state(ROUTED, 1), []))
    assert ev.estimates["router"].target_rate == pytest.approx(4500.0)
    assert ev.estimates["router"].optimal == 3
    assert ev.estimates["reduce"].optimal == 6  # 4500 / 750


def test_dry_run_records_decisions_without_a_scale():
    loop = make_loop(mode="dry-run")
    _, log, state = run(loop, 3, arrival=3000.0)
    scaling = [e for e in log if e["type"] == "SCALING"]
    assert len(scaling) == 2 and all(e["payload"][1]["mode"] == "DRY_RUN" for e in scaling)
    assert not [e for e in log if e["type"] == "SCALE"] and state.num_workers == 1
    assert replay(log, {"router": 1, "reduce": 1}).counts == {"router": 1, "reduce": 1}


def test_without_a_router_actuator_routers_are_estimated_not_decided():
    loop = make_loop(actuator=False)
    evals, _, _ = run(loop, 3, arrival=3000.0)
    assert evals[2].estimates["router"].optimal == 2
    assert [d.stage for d in evals[2].decisions] == ["reduce"]


def test_nothing_is_decided_while_a_migration_is_in_flight():
    loop = make_loop()
    evals, log, _ = run(loop, 4, arrival=3000.0, migrating=True)
    assert all(ev.held and not ev.decisions for ev in evals)
    assert evals[-1].estimates["reduce"].optimal == 4
    assert len(log) == 1


def test_no_scale_down_while_shedding():
    loop = make_loop(scale_down_delay_s=0.0)
    loop.decider.counts["reduce"] = 6
    log = [make_event(0, "TABLE_SNAPSHOT", {"num_workers": 6, "table": {}, "routed_partitions": ROUTED}),
           make_event(1, *shedding("*", 0.5))]  # fmt: skip
    state = fold(initial_state(ROUTED, 6), log)
    for k in range(3):
        feed(loop, 10.0 * (k + 1), 750.0, 6)  # one worker's load
        assert loop.evaluate(10.0 * (k + 1), state).decisions == []
    calm = fold(initial_state(ROUTED, 6), log[:1])
    feed(loop, 40.0, 750.0, 6)
    (d,) = [d for d in loop.evaluate(40.0, calm).decisions if d.stage == "reduce"]
    assert (d.before, d.after) == (6, 1)


def test_shedding_does_not_lower_the_reduce_target_so_the_scale_up_that_lifts_it_is_made():
    """A router keeping half of a 3,000/s input: the reduce must still be sized for 3,000/s (4
    workers at 750/s), not for the 1,500/s shedding lets through (2 workers). Sized for what it is
    let through, the reduce never grows past what the shedder lets in, and shedding never lifts."""
    loop = make_loop(activation=1)
    loop.observe(10.0, "router-0", 0, 10_000, router_stats(kept=ROUTER_OFFERED // 2), 1)
    for i, rows in enumerate((1000, 2000, 3000, 4000, 5000, 6000)):
        loop.observe(10.0, "reduce", 0, 0, batch(i, rows, 1), 1)
    loop.observe(10.0, "shedder", 0, 0, lag(3000.0), 1)
    est = loop.evaluate(10.0, fold(initial_state(ROUTED, 1), [])).estimates
    assert est["router"].selectivity == pytest.approx(1.0)
    assert est["reduce"].target_rate == pytest.approx(3000.0, rel=0.01)
    assert est["reduce"].optimal == 4


def test_dead_letters_are_not_carried_to_the_reduce():
    """A tenth of the input is bad and dead-lettered by the router: the reduce gets nine tenths."""
    loop = make_loop(activation=1)
    loop.observe(10.0, "router-0", 0, 10_000, router_stats(dead=ROUTER_OFFERED // 10), 1)
    loop.observe(10.0, "shedder", 0, 0, lag(3000.0), 1)
    est = loop.evaluate(10.0, fold(initial_state(ROUTED, 1), [])).estimates
    assert est["router"].selectivity == pytest.approx(0.9)
    assert est["reduce"].target_rate == pytest.approx(2700.0, rel=0.01)


def test_an_operators_scale_wins():
    loop = make_loop()
    log = [make_event(0, "TABLE_SNAPSHOT", {"num_workers": 3, "table": {}, "routed_partitions": ROUTED})]
    feed(loop, 10.0, 3000.0, 3)
    ev = loop.evaluate(10.0, fold(initial_state(ROUTED, 3), log))
    assert ev.estimates["reduce"].current == 3


def test_routers_that_did_not_measure_useful_time_are_left_out():
    loop = make_loop()
    loop.observe(10.0, "old-router", 0, 10_000, router_stats(useful_ms=None), 1)
    loop.observe(10.0, "shedder", 0, 0, lag(3000.0), 1)
    ev = loop.evaluate(10.0, fold(initial_state(ROUTED, 1), []))
    assert ev.estimates["router"].true_rate_per_instance is None
    assert "no useful work measured" in ev.estimates["router"].reason


def test_a_pinned_key_bounds_a_scale_down_so_the_log_takes_every_scale():
    """A key pinned to worker 2 keeps it: the policy goes down to 3 workers, not 1, and the SCALE it
    writes is one the log's fold accepts (a SCALE to 1 would be refused)."""
    loop = make_loop(scale_down_delay_s=0.0)
    loop.decider.counts["reduce"] = 6
    snapshot = {"num_workers": 6, "table": {"hot": 2}, "routed_partitions": ROUTED}
    log = [make_event(0, "TABLE_SNAPSHOT", snapshot)]
    state = fold(initial_state(ROUTED, 6), log)
    feed(loop, 10.0, 750.0, 6)
    ev = loop.evaluate(10.0, state)
    (d,) = [d for d in ev.decisions if d.stage == "reduce"]
    assert (d.before, d.after) == (6, 3)
    for etype, body in ev.events:
        log.append(make_event(len(log), etype, body))
    assert fold(initial_state(ROUTED, 6), log).num_workers == 3


def test_router_reports_last_two_of_their_spans_when_evaluations_come_faster():
    """Routers report every 10 s here and the loop evaluates every 2 s: an evaluation between two
    reports still sees the working router (it read as idle, and broke every activation, before)."""
    d = DecisionSettings(warmup=0, activation=3, scale_down_delay_s=60.0)
    loop = ScalingLoop(ScalingSettings(mode="on", interval_s=2.0, catch_up_s=60.0, router_actuator=True,
                                       decisions=d), 1, 1, INPUT_PARTITIONS, ROUTED)  # fmt: skip
    state = fold(initial_state(ROUTED, 1), [])
    loop.observe(10.0, "router-0", 0, 10_000, router_stats(), 1)
    loop.observe(10.0, "shedder", 0, 0, lag(3000.0), 1)
    for now in (12.0, 16.0, 20.0):
        assert loop.evaluate(now, state).estimates["router"].true_rate_per_instance == pytest.approx(2000)
    assert loop.evaluate(31.0, state).estimates["router"].true_rate_per_instance is None  # 21 s: gone


def test_the_busy_time_rule_sizes_from_the_busiest_instance_and_decides_on_one_estimate():
    """The rule DS2 is benchmarked against, on the same metrics. Router: 500 records/s in, useful
    25 % of its span: 2,000/s at full use; 3,000/s wanted at utilization 0.7 is 4,286/s, x2.14,
    so 3 routers (DS2 says 2). Reduce: 21,000 rows in the 10 s evaluation, its busiest worker busy
    9 of them: 2,333/s at full use, x1.84 of it wanted, so 2 workers. Flink decides on one
    estimate: both apply at the first evaluation, though DS2's activation here is 3."""
    settings = ScalingSettings(mode="on", interval_s=10.0, catch_up_s=60.0, reduce_trigger_s=TRIGGER_S,
                               router_actuator=True, decisions=DecisionSettings(warmup=0, activation=3),
                               policy="busy-time")  # fmt: skip
    loop = ScalingLoop(settings, routers=1, reduce_workers=1, input_partitions=INPUT_PARTITIONS,
                       routed_partitions=ROUTED)  # fmt: skip
    feed(loop, 10.0, 3000.0, 1)
    for busy_ms in (5_000, 4_000):  # worker 0's steps; worker 1 is idle under 1 hashed worker
        loop.observe(10.0, "j/worker-0", 0, 0, WorkerStats.of({"worker": 0, "epoch": 0, "records": 1,
                     "busy_ms": busy_ms, "state_bytes": 0, "state_keys": 0}), 1)  # fmt: skip
    log = [make_event(0, "TABLE_SNAPSHOT", {"num_workers": 1, "table": {}, "routed_partitions": ROUTED})]
    state = fold(initial_state(ROUTED, 1), log)
    ev = loop.evaluate(10.0, state)
    assert ev.estimates["router"].true_rate_per_instance == pytest.approx(2000.0)
    assert {(d.stage, d.before, d.after) for d in ev.decisions} == {("router", 1, 3), ("reduce", 1, 2)}
    for etype, body in ev.events:
        log.append(make_event(len(log), etype, body))
    assert replay(log[1:], {"router": 1, "reduce": 1}).counts == {"router": 3, "reduce": 2}
    with pytest.raises(ValueError):
        ScalingSettings(policy="cpu")
