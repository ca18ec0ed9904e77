"""The one poll loop: returns the condition's value, and a time-out names what it waited for."""

from __future__ import annotations

import itertools

import pytest

from ballast.waiting import WaitTimeout, wait_until

pytestmark = pytest.mark.unit


def test_returns_the_first_truthy_value():
    calls = itertools.count()
    assert wait_until(lambda: next(calls) >= 3 and "done", 5, "three calls", interval=0) == "done"


def test_time_out_names_the_wait_and_the_last_state():
    with pytest.raises(WaitTimeout, match=r"the impossible: not reached within 0.05 s \(still 0 of 1\)"):
        wait_until(lambda: False, 0.05, "the impossible", interval=0.01, describe=lambda: "still 0 of 1")


def test_a_condition_that_raises_stops_the_wait():
    def cond() -> bool:
        raise RuntimeError("router died")

    with pytest.raises(RuntimeError, match="router died"):
        wait_until(cond, 5, "a dead router")
