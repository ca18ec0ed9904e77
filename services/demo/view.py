"""What the user watches while the demo runs: each run's status side by side, or status lines.

Why the same drawing as ``ballast status``: see :mod:`ballast.status.view`. Without a terminal
(``--no-live``, CI, a pipe) the view prints one line per run every ``LINE_EVERY_S`` instead, so a log
of the demo says what happened too.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from rich.columns import Columns
from rich.console import Console, Group
from rich.live import Live
from rich.text import Text

from ballast.status.view import headline, render
from services.demo.deployment import DemoRun

LINE_EVERY_S = 10.0
TITLES = {"ballast": "Ballast: loop and shedding on", "hash": "hash only, no shedding"}


class DemoView:
    """A live view (rich) or periodic lines, fed by the orchestrator once a second."""

    def __init__(self, console: Console, live: bool) -> None:
        self.console = console
        self.live = Live(console=console, refresh_per_second=2, transient=False) if live else None
        self._last_line = 0.0

    def __enter__(self) -> DemoView:
        if self.live is not None:
            self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live is not None:
            self.live.__exit__(None, None, None)

    def say(self, message: str) -> None:
        """A line above the live view (or in the log)."""
        self.console.print(f"[dim]{time.strftime('%H:%M:%S')}[/dim] {message}", soft_wrap=True)

    def update(self, header: str, runs: Sequence[DemoRun]) -> None:
        if self.live is not None:
            panels = [render(r.status, TITLES.get(r.name, r.name)) for r in runs if r.status is not None]
            self.live.update(Group(Text(header, style="bold"), Columns(panels)))
            return
        now = time.monotonic()
        if now - self._last_line >= LINE_EVERY_S:
            self._last_line = now
            self.say(header)
            for r in runs:
                if r.status is not None:
                    self.say(f"  {r.name}: {headline(r.status)}")
