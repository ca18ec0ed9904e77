"""Waiting on a condition: the one poll loop every service, test and benchmark uses.

Why one helper: a wait is easy to get subtly wrong (a deadline measured with wall time, a timeout
that says nothing about what was awaited, a check that runs once more after the deadline and hides
the failure). :func:`wait_until` polls ``condition`` until it returns a truthy value, returns that
value, and on time-out raises :class:`WaitTimeout` naming what it waited for and the last value.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class WaitTimeout(TimeoutError):
    """A condition did not become true in time; the message says which and what was last seen."""


def wait_until(
    condition: Callable[[], T],
    timeout: float,
    what: str,
    interval: float = 0.1,
    describe: Callable[[], str] | None = None,
) -> T:
    """Poll ``condition`` every ``interval`` seconds until truthy; return its value.

    ``describe`` (optional) renders the current situation for the time-out message, e.g.
    ``lambda: f"{done} of {total} records"``.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            seen = f" ({describe()})" if describe is not None else ""
            raise WaitTimeout(f"{what}: not reached within {timeout:g} s{seen}")
        time.sleep(interval)
