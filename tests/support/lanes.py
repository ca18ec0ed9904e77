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
SATURATING_MODULES = frozenset({
    "test_chaos", "test_controller", "test_demo", "test_reduce", "test_reduce_cluster",
    "test_reduce_lag", "test_secured", "test_three_hosts",
})  # fmt: skip
FOLDER_ORDER = ("integration", "e2e", "docker", "unit")  # after the saturating lane: longest first


def lane_of(nodeid: str) -> str:
    """The work unit of a test: the saturating lane, or its module."""
    module = nodeid.split("::", 1)[0]
    return SATURATING if PurePosixPath(module).stem in SATURATING_MODULES else module


def run_order(nodeid: str) -> int:
    """Sort key of the collection: the saturating lane first (it is the longest), then by folder, so
    what is left for the end is short."""
    if lane_of(nodeid) == SATURATING:
        return -1
    parts = PurePosixPath(nodeid.split("::", 1)[0]).parts
    return next((i for i, folder in enumerate(FOLDER_ORDER) if folder in parts), len(FOLDER_ORDER))


class LanePlugin:
    """Registered by tests/conftest.py when xdist is installed (the hook is xdist's)."""

    def pytest_xdist_make_scheduler(self, config: Any, log: Any) -> Any:
        from xdist.scheduler import LoadScopeScheduling

        class LaneScheduling(LoadScopeScheduling):
            def _split_scope(self, nodeid: str) -> str:
                return lane_of(nodeid)

        return LaneScheduling(config, log)
