"""Scaling decisions through the control log: encoded with the real Avro codec, folded by the real
control-state fold, and replayed to the same counts the deciding policy holds. A log whose
decisions do not follow from their estimates, or whose reduce decision lacks its SCALE, is refused."""

from __future__ import annotations

import numpy as np
import pytest

from ballast.avro.codec import AvroCodec
from ballast.control.cli import summary
from ballast.control.state import CONTROL_SCHEMA, InvalidEventError, fold, initial_state, make_event, scale
from services.controller.scaling.decisions import DOWN, UP, Decider, DecisionSettings, StageDecision
from services.controller.scaling.ds2 import Estimate
from services.controller.scaling.replay import REDUCE, ROUTER, ReplayError, decision_event, replay

pytestmark = pytest.mark.unit

ROUTED = 16


def estimate(stage: str, current: int, optimal: int) -> Estimate:
    return Estimate(stage, current, optimal, 1000.0 * optimal, 1000.0, 1.0, 1000.0 * optimal, False, "t")


def decide_a_week(seed: int, evaluations: int = 3000) -> tuple[Decider, list[tuple[StageDecision, Estimate]]]:
    """A drifting load over both stages: the optimal counts wander (a random walk with noise),
    as they would over days of a stream that grows and shrinks."""
    rng = np.random.default_rng(seed)
    settings = DecisionSettings(warmup=2, activation=3, scale_down_delay_s=600.0)
    decider = Decider(settings, {ROUTER: 1, REDUCE: 1})
    level = {ROUTER: 1.0, REDUCE: 2.0}
    out = []
    for i in range(evaluations):
        now = 30.0 * i
        estimates = {}
        for stage in (ROUTER, REDUCE):
            level[stage] = float(np.clip(level[stage] + rng.normal(0, 0.25), 1, ROUTED))
            optimal = int(np.clip(round(level[stage] + rng.normal(0, 0.6)), 1, ROUTED))
            estimates[stage] = estimate(stage, decider.counts[stage], optimal)
        for d in decider.evaluate(now, estimates, shedding=bool(rng.random() < 0.05)):
            out.append((d, estimates[d.stage]))
    return decider, out


def as_log(decisions: list[tuple[StageDecision, Estimate]], dry_run_every: int = 0) -> list[dict]:
    """The events the controller writes, through the codec's bytes: a genesis, then each decision,
    an applied reduce decision followed by its SCALE."""
    codec = AvroCodec(CONTROL_SCHEMA)
    events = [make_event(0, "TABLE_SNAPSHOT", {"num_workers": 1, "table": {}, "routed_partitions": ROUTED})]
    for i, (d, est) in enumerate(decisions):
        applied = not (dry_run_every and i % dry_run_every == dry_run_every - 1)
        body = decision_event(d, est, applied=applied, inputs={"arrival_rate": 5.0})
        events.append(make_event(len(events), *body))
        if applied and d.stage == REDUCE:
            events.append(make_event(len(events), *scale(d.after, d.reason)))
    return [codec.decode(codec.encode(e)) for e in events]


def test_a_week_of_decisions_replays_to_the_policys_counts():
    decider, decisions = decide_a_week(seed=3)
    ups = sum(d.rule == UP for d, _ in decisions)
    downs = sum(d.rule == DOWN for d, _ in decisions)
    assert ups >= 10 and downs >= 10, (ups, downs)  # the trace exercises both rules
    log = as_log(decisions)
    state = fold(initial_state(ROUTED), log)  # the real fold takes every SCALING event
    assert state.epoch == len(log) - 1
    assert state.num_workers == decider.counts[REDUCE]
    replayed = replay(log, initial={ROUTER: 1, REDUCE: 1})
    assert replayed.counts == decider.counts
    assert len(replayed.decisions) == len(decisions)


def test_dry_run_decisions_are_on_record_and_change_no_count():
    _, decisions = decide_a_week(seed=4, evaluations=600)
    # in a dry run the policy's counts would still move (it believes its decisions); here every
    # decision is dry: the replayed counts stay where they began
    log = as_log(decisions, dry_run_every=1)
    replayed = replay(log, initial={ROUTER: 1, REDUCE: 1})
    assert replayed.counts == {ROUTER: 1, REDUCE: 1}
    assert replayed.dry_runs == len(decisions) > 0
    assert "(dry run)" in summary(log[1])


def _tampered(log: list[dict], index: int, **changes) -> list[dict]:
    out = [dict(e) for e in log]
    name, body = out[index]["payload"]
    out[index]["payload"] = (name, {**body, **changes})
    return out


def test_a_count_that_does_not_follow_from_its_estimates_is_refused():
    _, decisions = decide_a_week(seed=3, evaluations=400)
    log = as_log(decisions)
    i = next(k for k, e in enumerate(log) if e["type"] == "SCALING")
    body = log[i]["payload"][1]
    with pytest.raises(ReplayError, match="gives"):
        replay(_tampered(log, i, to_instances=body["to_instances"] + 1))


def test_a_reduce_decision_without_its_scale_is_refused():
    _, decisions = decide_a_week(seed=3, evaluations=400)
    log = as_log(decisions)
    i = next(k for k, e in enumerate(log) if e["type"] == "SCALE")
    with pytest.raises(ReplayError, match="not followed by its SCALE"):
        replay(log[:i] + log[i + 1 :])
    with pytest.raises(ReplayError, match="ends before"):
        replay(log[:i])


def test_a_broken_chain_is_refused():
    d1 = StageDecision(ROUTER, 1, 3, "up", UP, (3, 3, 4))
    d2 = StageDecision(ROUTER, 2, 4, "up", UP, (4, 4, 5))  # starts from 2, the log left 3
    log = as_log([(d1, estimate(ROUTER, 1, 3)), (d2, estimate(ROUTER, 2, 4))])
    with pytest.raises(ReplayError, match="starts from 2, the log left 3"):
        replay(log)


def test_the_fold_refuses_a_decision_to_zero_instances():
    bad = StageDecision(ROUTER, 2, 0, "down", DOWN, (0,))
    log = as_log([(bad, estimate(ROUTER, 2, 0))])
    with pytest.raises(InvalidEventError, match="to_instances >= 1"):
        fold(initial_state(ROUTED), log)
