"""Each stage's applied decisions reach its hook only once their events are committed: the reduce
hook (the compute under the hashed workers) after the decision and its ``SCALE`` are in the log,
the router hook as before; a stage without a hook is decided (the reduce) or estimated (routers)."""

from __future__ import annotations

from typing import Any

import pytest

from ballast.control.state import fold, initial_state, make_event
from ballast.waiting import wait_until
from services.controller.autoscaler import Autoscaler
from services.controller.config import ControllerSettings
from tests.unit.services.controller.test_scaling_loop import ROUTED, TRIGGER_S, feed

pytestmark = pytest.mark.unit


def autoscaler(tmp_path, **hooks: str) -> Autoscaler:
    s = ControllerSettings(scaling="on", scaling_warmup=0, scaling_activation=1, reduce_trigger_s=TRIGGER_S,
                           scaling_interval_s=10.0, scaling_catch_up_s=60.0, **hooks)  # fmt: skip
    return Autoscaler(s, input_partitions=4, routed_partitions=ROUTED)


def evaluate_3000_per_s(a: Autoscaler) -> list[dict[str, Any]]:
    """One evaluation at 3,000/s (2 routers, 4 workers: test_scaling_loop's worked example)."""
    log = [make_event(0, "TABLE_SNAPSHOT", {"num_workers": 1, "table": {}, "routed_partitions": ROUTED})]
    state = fold(initial_state(ROUTED, 1), log)
    a.start(state)

    def own(etype: str, body: dict[str, Any]) -> dict[str, Any]:
        log.append(make_event(len(log), etype, body))
        return log[-1]

    feed(a.loop, 10.0, 3000.0, 1)
    a.evaluate(10.0, state, False, own)
    return log


def test_the_reduce_hook_gets_the_decision_after_its_scale_is_committed(tmp_path):
    out = tmp_path / "calls"
    said = '"$BALLAST_SCALING_STAGE $BALLAST_SCALING_FROM $BALLAST_SCALING_TO $BALLAST_SCALING_EPOCH"'
    a = autoscaler(tmp_path, reduce_hook=f"echo {said} >> {out}", router_hook=f"echo {said} >> {out}")
    try:
        log = evaluate_3000_per_s(a)
        assert not out.exists()  # nothing acts before the controller's transaction commits
        a.committed()
        wait_until(lambda: out.exists() and len(out.read_text().splitlines()) == 2, 20, "both hooks ran")
        decided = {e["payload"][1]["stage"]: e["epoch"] for e in log if e["type"] == "SCALING"}
        scale = next(e for e in log if e["type"] == "SCALE")
        assert scale["payload"][1]["num_workers"] == 4 and scale["epoch"] == decided["reduce"] + 1
        assert sorted(out.read_text().splitlines()) == sorted(
            [f"reduce 1 4 {decided['reduce']}", f"router 1 2 {decided['router']}"]
        )
    finally:
        a.close()


def test_without_a_reduce_hook_the_reduce_is_still_decided_and_nothing_runs(tmp_path):
    out = tmp_path / "calls"
    a = autoscaler(tmp_path, router_hook=f"echo $BALLAST_SCALING_STAGE >> {out}")
    try:
        log = evaluate_3000_per_s(a)
        a.committed()
        wait_until(lambda: out.exists(), 20, "the router hook ran")
        assert [e["payload"][1]["num_workers"] for e in log if e["type"] == "SCALE"] == [4]
        assert out.read_text().split() == ["router"]
    finally:
        a.close()
