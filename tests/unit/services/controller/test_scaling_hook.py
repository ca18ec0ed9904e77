"""A scaling hook (either stage's) runs a real command in the background, one at a time, with the
decision in its environment; a failure and a hook past its time limit are counted and said, never
waited on."""

from __future__ import annotations

import time

import pytest

from ballast.waiting import wait_until
from services.controller.actuators import HookCall, ScalingHook

pytestmark = pytest.mark.unit


def finish(hook: ScalingHook, n: int, timeout: float = 20.0) -> None:
    wait_until(lambda: hook.poll() is not None and len(hook.done) >= n, timeout, f"{n} hook runs")


def test_calls_run_in_order_one_at_a_time_with_the_decision_in_their_environment(tmp_path):
    out, go = tmp_path / "calls", tmp_path / "go"
    said = '"$BALLAST_SCALING_STAGE $BALLAST_SCALING_FROM $BALLAST_SCALING_TO $BALLAST_SCALING_EPOCH"'
    hook = ScalingHook(f"while [ ! -e {go} ]; do sleep 0.05; done; echo {said} >> {out}")
    hook.submit(HookCall("router", 1, 2, 7))
    hook.submit(HookCall("router", 2, 4, 9))
    # submitting never waits for the command: both calls are back while the first cannot finish
    assert hook.done == [] and not out.exists()
    go.touch()
    finish(hook, 2)
    assert out.read_text().splitlines() == ["router 1 2 7", "router 2 4 9"]
    assert [r.returncode for r in hook.done] == [0, 0] and hook.failures == 0


def test_a_failing_hook_is_counted_with_its_output(tmp_path):
    hook = ScalingHook("echo no such deployment >&2; exit 3")
    hook.submit(HookCall("router", 1, 2, 3))
    finish(hook, 1)
    (result,) = hook.done
    assert result.returncode == 3 and "no such deployment" in result.output and hook.failures == 1


def test_a_hook_past_its_time_limit_is_killed_and_the_next_runs(tmp_path):
    out = tmp_path / "after"
    hook = ScalingHook(f'[ "$BALLAST_SCALING_TO" = 2 ] && sleep 30; echo ran >> {out}', timeout_s=1.0)
    hook.submit(HookCall("router", 1, 2, 3))
    hook.submit(HookCall("router", 2, 3, 4))
    finish(hook, 2, timeout=20)
    assert hook.done[0].returncode is None and hook.failures == 1
    assert hook.done[1].returncode == 0 and out.read_text() == "ran\n"


def test_a_killed_hook_leaves_no_process_behind(tmp_path):
    marker = tmp_path / "still-here"
    hook = ScalingHook(f"(sleep 2; touch {marker}) & wait", timeout_s=0.5)
    hook.submit(HookCall("router", 1, 2, 3))
    finish(hook, 1)
    time.sleep(2.5)
    assert not marker.exists()  # the hook's child went with it
