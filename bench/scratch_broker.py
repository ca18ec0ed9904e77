"""A benchmark's own broker for one run, its deployments run one after another, its logs kept on failure.

Why one home: the migration and shedding benchmarks each start a broker in a fresh folder, run
several fresh deployments on it (pacing modes, shedding on and off), keep going when one fails
(the report says what failed), and keep the services' logs only when something did: that is what
a reader of a failed run needs, and a passed run should leave nothing behind.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

from ballast.devstack.stack import start_stack, stop_stack
from ballast.kafka.configuration import KafkaConfig


class ScratchBroker:
    """``with ScratchBroker("shed", log) as run:`` a broker in ``run.workdir``, ``run.kafka`` to reach
    it; :meth:`each` runs one deployment and turns its failure into a result. On leaving, the broker
    is stopped and its data purged; the folder goes too unless a deployment (or the block) failed."""

    def __init__(self, name: str, log: Callable[[str], None]) -> None:
        self.name = name
        self.log = log
        self.workdir = Path(tempfile.mkdtemp(prefix=f"ballast-bench-{name}-"))
        self.kafka: KafkaConfig | None = None
        self.failed = False

    def __enter__(self) -> ScratchBroker:
        stack = start_stack(self.workdir / "stack", brokers=1)
        self.kafka = KafkaConfig.plaintext(stack.bootstrap, f"bench-{self.name}")
        return self

    def each(self, kind: str, label: str, run: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """``run()``'s result, or ``{kind: label, "error": ...}`` if it raised (the others still run)."""
        try:
            return run()
        except Exception as exc:  # the report says what failed; the next deployment still runs
            self.log(f"{label} failed: {exc!r}")
            self.failed = True
            return {kind: label, "error": repr(exc)}

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        stop_stack(self.workdir / "stack", purge=True)
        if self.failed or exc is not None:  # the services' logs say what went wrong
            self.log(f"logs of the services kept in {self.workdir}/pipeline-*/")
        else:
            shutil.rmtree(self.workdir, ignore_errors=True)
