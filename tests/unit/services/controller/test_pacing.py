"""Paced migration: steps by mode, and the migration state machine driven by installs and time."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from services.controller.pacing import (
    KeyMove,
    Marker,
    Migration,
    Mode,
    OnTimeout,
    PacingSettings,
    SendStep,
    StepTimedOut,
    split_steps,
)

pytestmark = pytest.mark.unit

SCHEMA = Path(__file__).resolve().parents[4] / "ballast" / "schemas" / "control_event.avsc"


def moves(*sizes: int) -> list[KeyMove]:
    return [KeyMove(f"k{i}", i % 3, (i + 1) % 3, s) for i, s in enumerate(sizes)]


def keys(step) -> list[str]:
    return [m.key for m in step]


def test_all_at_once_and_fluid():
    ms = moves(5, 5, 5)
    assert [keys(s) for s in split_steps(ms, PacingSettings(mode=Mode.ALL_AT_ONCE))] == [["k0", "k1", "k2"]]
    assert [keys(s) for s in split_steps(ms, PacingSettings(mode="fluid"))] == [["k0"], ["k1"], ["k2"]]
    assert split_steps([], PacingSettings(mode=Mode.ALL_AT_ONCE)) == []


def test_batched_by_key_count():
    got = split_steps(moves(1, 1, 1, 1, 1), PacingSettings(mode=Mode.BATCHED, max_keys=2))
    assert [keys(s) for s in got] == [["k0", "k1"], ["k2", "k3"], ["k4"]]


def test_batched_by_bytes_keeps_order_and_puts_an_oversized_key_alone():
    # S = 10: 4+5 fit (9), +3 would be 12 -> new step; 3+6 = 9; 20 alone (never split); 1.
    got = split_steps(moves(4, 5, 3, 6, 20, 1), PacingSettings(mode=Mode.BATCHED, max_keys=10, max_bytes=10))
    assert [keys(s) for s in got] == [["k0", "k1"], ["k2", "k3"], ["k4"], ["k5"]]
    assert all(sum(m.state_bytes for m in s) <= 10 or len(s) == 1 for s in got)


def test_a_key_moved_twice_is_refused():
    with pytest.raises(ValueError):
        split_steps([KeyMove("a", 0, 1), KeyMove("a", 1, 2)], PacingSettings())


def test_migration_goes_step_by_step_on_installs():
    m = Migration("m1", [moves(1, 1)[:2], moves(1, 1, 1)[2:]], step_timeout_s=10)
    out = m.start(now=0.0)
    assert out[0] == Marker("m1", "START", ("k0", "k1", "k2"), (0, 1, 2), (1, 2, 0))
    assert isinstance(out[1], SendStep) and out[1].index == 0 and keys(out[1].moves) == ["k0", "k1"]
    m.sent(0, epoch=10)
    assert m.observe([("k0", 10)], now=1.0) == []  # k1 still missing: wait, no next step
    out = m.observe([("k1", 11)], now=2.0)
    assert len(out) == 1 and isinstance(out[0], SendStep) and out[0].index == 1
    m.sent(1, epoch=12)
    out = m.observe([("k2", 12)], now=3.0)
    assert out == [Marker("m1", "DONE", ("k0", "k1", "k2"), (0, 1, 2), (1, 2, 0))]
    assert m.phase == "done" and m.finished and m.timeouts == []


def test_an_install_from_before_the_steps_epoch_does_not_count():
    m = Migration("m", [moves(1)], step_timeout_s=10)
    m.start(0.0)
    m.sent(0, epoch=20)
    assert m.observe([("k0", 7)], now=1.0) == []  # an earlier move of k0
    assert m.observe([("k0", 20)], now=2.0)[0].phase == "DONE"


def test_installs_reported_before_the_epoch_is_known_count_once_it_is():
    m = Migration("m", [moves(1)], step_timeout_s=10)
    m.start(0.0)
    assert m.observe([("k0", 5)], now=0.5) == []  # no epoch yet: cannot tell which move it was
    m.sent(0, epoch=5)
    assert m.observe([], now=1.0)[0].phase == "DONE"


def test_a_time_out_aborts_by_default_and_says_what_is_missing():
    m = Migration("m", [moves(1, 1)[:2], moves(1, 1, 1)[2:]], step_timeout_s=5)
    m.start(now=100.0)
    m.sent(0, epoch=3)
    assert m.observe([("k0", 3)], now=104.9) == []  # not yet 5 s: still waiting
    out = m.observe([], now=105.0)
    assert out[0] == StepTimedOut(0, ("k1",), 5.0)
    # ABORT lists what is not installed: k1 (timed out) and k2 (never sent), with their workers
    assert out[1] == Marker("m", "ABORT", ("k1", "k2"), (1, 2), (2, 0))
    assert m.phase == "aborted" and m.observe([("k1", 3)], now=200.0) == []


def test_a_time_out_with_continue_is_reported_and_the_next_step_goes_out():
    m = Migration("m", [moves(1, 1)[:1], moves(1, 1)[1:]], step_timeout_s=5, on_timeout=OnTimeout.CONTINUE)
    m.start(0.0)
    m.sent(0, epoch=3)
    out = m.observe([], now=6.0)
    assert out[0] == StepTimedOut(0, ("k0",), 6.0)
    assert isinstance(out[1], SendStep) and out[1].index == 1
    m.sent(1, epoch=4)
    # the late install of k0 arrives with k1: everything installed, DONE
    out = m.observe([("k0", 3), ("k1", 4)], now=7.0)
    assert out == [Marker("m", "DONE", ("k0", "k1"), (0, 1), (1, 2))]
    assert len(m.timeouts) == 1


def test_continue_ends_in_abort_when_a_timed_out_key_never_arrives():
    m = Migration("m", [moves(1, 1)[:1], moves(1, 1)[1:]], step_timeout_s=5, on_timeout="continue")
    m.start(0.0)
    m.sent(0, epoch=3)
    m.observe([], now=6.0)
    m.sent(1, epoch=4)
    out = m.observe([("k1", 4)], now=7.0)
    assert out == [Marker("m", "ABORT", ("k0",), (0,), (1,))]


def test_a_step_never_confirmed_by_the_transport_still_times_out():
    m = Migration("m", [moves(1)], step_timeout_s=5)
    m.start(0.0)
    out = m.observe([("k0", 99)], now=5.0)
    assert isinstance(out[0], StepTimedOut) and out[1].phase == "ABORT"


def test_nothing_to_move_is_a_start_and_a_done():
    m = Migration.plan("m", [], PacingSettings())
    assert m.start(0.0) == [Marker("m", "START", (), (), ()), Marker("m", "DONE", (), (), ())]


def test_plan_uses_the_settings_mode_and_time_out():
    m = Migration.plan("m", moves(1, 1, 1), PacingSettings(mode=Mode.FLUID, step_timeout_s=2))
    assert len(m.steps) == 3 and m.step_timeout_s == 2.0 and m.on_timeout is OnTimeout.ABORT


def test_abort_from_outside_and_state_errors():
    m = Migration("m", [moves(1, 1)], step_timeout_s=5)
    with pytest.raises(RuntimeError):
        m.sent(0, 1)  # not started
    m.start(0.0)
    with pytest.raises(RuntimeError):
        m.start(1.0)
    with pytest.raises(RuntimeError):
        m.sent(1, 1)  # not the step in flight
    m.sent(0, 1)
    m.observe([("k0", 1)], now=1.0)
    assert m.abort() == [Marker("m", "ABORT", ("k1",), (1,), (2,))]
    assert m.abort() == []


def test_marker_payload_has_exactly_the_schemas_fields():
    schema = json.loads(SCHEMA.read_text())
    payloads = next(f for f in schema["fields"] if f["name"] == "payload")["type"]
    step = next(p for p in payloads if p["name"] == "MigrationStep")
    phases = next(f for f in step["fields"] if f["name"] == "phase")["type"]["symbols"]
    payload = Marker("m", "START", ("a",), (0,), (1,)).payload()
    assert set(payload) == {f["name"] for f in step["fields"]}
    assert {"START", "DONE", "ABORT"} <= set(phases)
    assert payload == {
        "migration_id": "m", "phase": "START", "keys": ["a"], "from_workers": [0], "to_workers": [1],
        "reason": "",
    }


@pytest.mark.parametrize(
    "kwargs",
    [{"max_keys": 0}, {"max_bytes": 0}, {"step_timeout_s": 0}, {"mode": "sideways"}, {"on_timeout": "x"}],
)
def test_settings_are_checked(kwargs):
    with pytest.raises(ValueError):
        PacingSettings(**kwargs)
