"""The demo for people: progress while it runs, then the per-worker load table and the verdict."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from services.demo.report import DemoReport


class ConsoleProgress:
    """Status lines and progress bars on a rich console (implements ``DemoProgress``)."""

    def __init__(self, console: Console) -> None:
        self.console = console

    def status(self, message: str) -> None:
        self.console.print(message, highlight=False)

    @contextmanager
    def counter(self, label: str, total: int) -> Iterator[Callable[[int], None]]:
        with Progress(console=self.console, transient=True) as progress:
            task = progress.add_task(label, total=total)
            yield lambda done: progress.update(task, completed=done)


def render(report: DemoReport, console: Console) -> None:
    """Per-worker records by routing epoch, the max/mean row, and whether every record arrived once."""
    if report.plan is not None:
        p = report.plan
        console.print(
            f"plan: {p.pinned_keys} keys pinned from {p.heavy_hitters:,} heavy hitters in "
            f"{p.plan_time_ms:.1f} ms, predicted max/mean {p.predicted_max_mean:.2f}"
            + ("" if p.feasible else " (infeasible: best effort)"),
            highlight=False,
        )
    console.print(
        f"router: {report.routed:,} routed, {report.markers} epoch markers, "
        f"{report.transactions} transactions, {report.dead_lettered} dead-lettered",
        highlight=False,
    )
    epochs = sorted(report.load_by_epoch)
    table = Table(title=f"{report.routed_topic}: records per worker and routing epoch")
    table.add_column("worker")
    for epoch in epochs:
        table.add_column(f"epoch {epoch}" + (" (hash)" if epoch == 0 else " (Mixed)"), justify="right")
    for w in range(report.workers):
        table.add_row(str(w), *(f"{report.load_by_epoch[e][w]:,}" for e in epochs))
    table.add_row("max/mean", *(f"{report.max_mean(e):.2f}" for e in epochs), style="bold")
    console.print(table)
    console.print(
        f"routed topic: {sum(sum(v) for v in report.load_by_epoch.values()):,} data records; "
        f"missing {report.missing}, duplicated {report.duplicated}",
        highlight=False,
    )
    if report.ok:
        console.print("[green]demo OK: every record routed exactly once[/]")
    else:
        console.print("[red]demo FAILED[/]")
