"""Which xdist worker runs which tests (``make test`` runs two): the lanes of the suite.

Why our own scheduler and not ``xdist_group`` marks: xdist 3.8 groups by rewriting ``item._nodeid``,
which pytest 9 no longer reads, so marked tests were spread over both workers. The hook
``pytest_xdist_make_scheduler`` is xdist's public way to decide the work units instead.

The units: every module whose tests run the whole pipeline at a rate sized for the machine's two
cores (Spark, brokers, routers, a paced input) is in one unit, the *saturating* lane, run in turn on
one worker, so no two of them ever share the machine; every other module is a unit of its own (its
fixtures are set up once), handed to whichever worker is free. Most of those wait on brokers and
timeouts (integration tests keep a core ~45 % busy), which is what the second worker overlaps.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

SATURATING = "saturating"
# in the order they run: those whose checks ride on timing (a plan made from a 3 s interval, a
# burst shed within its 10 s) last, when the other worker has the least left to run beside them
SATURATING_ORDER = (
    "test_chaos", "test_three_hosts", "test_reduce", "test_reduce_cluster", "test_reduce_lag",
    "test_secured", "test_scaling", "test_controller", "test_demo",
)  # fmt: skip
SATURATING_MODULES = frozenset(SATURATING_ORDER)
FOLDER_ORDER = ("integration", "e2e", "docker", "unit")  # after the saturating lane: longest first


def lane_of(nodeid: str) -> str:
    """The work unit of a test: the saturating lane, or its module."""
    module = nodeid.split("::", 1)[0]
    return SATURATING if PurePosixPath(module).stem in SATURATING_MODULES else module


def run_order(nodeid: str) -> tuple[int, int]:
    """Sort key of the collection: the saturating lane first (it is the longest), in its own order,
    then by folder, so what is left for the end is short."""
    module = PurePosixPath(nodeid.split("::", 1)[0])
    if module.stem in SATURATING_MODULES:
        return -1, SATURATING_ORDER.index(module.stem)
    folder = next((i for i, name in enumerate(FOLDER_ORDER) if name in module.parts), len(FOLDER_ORDER))
    return folder, 0


class LanePlugin:
    """Registered by tests/conftest.py when xdist is installed (the hook is xdist's)."""

    def pytest_xdist_make_scheduler(self, config: Any, log: Any) -> Any:
        from xdist.scheduler import LoadScopeScheduling

        class LaneScheduling(LoadScopeScheduling):
            def _split_scope(self, nodeid: str) -> str:
                return lane_of(nodeid)

        return LaneScheduling(config, log)
