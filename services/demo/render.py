"""The demo for people: progress while it runs, the per-worker load table, the reduce, the verdict."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from services.demo.report import DemoReport, ReduceSummary


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
    flush = f" + {report.flush_events} flush event" if report.flush_events else ""
    console.print(
        f"routed topic: {sum(sum(v) for v in report.load_by_epoch.values()):,} data records{flush}; "
        f"missing {report.missing}, duplicated {report.duplicated}",
        highlight=False,
    )
    if report.reduce is not None:
        render_reduce(report.reduce, console)
    if report.ok:
        reduced = "; the reduce matches the input for every key" if report.reduce is not None else ""
        console.print(f"[green]demo OK: every record routed exactly once{reduced}[/]")
    else:
        failed = [] if report.routing_ok else ["routing"]
        failed += ["reduce"] if report.reduce is not None and not report.reduce.ok else []
        console.print(f"[red]demo FAILED ({', '.join(failed)})[/]")


def render_reduce(r: ReduceSummary, console: Console) -> None:
    """A few lines: what the job wrote, the check against ground truth, and the live migration."""
    say = lambda text: console.print(text, highlight=False)  # noqa: E731
    say(
        f"reduce ({r.job}: {r.processor}, watermark delay {r.watermark_delay}, trigger {r.trigger}, "
        f"local[{r.local_cores}]): {r.windows:,} windows from {r.micro_batches} micro-batches "
        f"(median {r.batch_ms_median / 1000:.1f} s, longest {r.batch_ms_max / 1000:.1f} s; "
        f"{r.worker_steps:,} worker steps); Spark up in {r.start_s:.1f} s, output complete "
        f"{r.drain_s:.1f} s after the flush event"
    )
    say(
        f"  check: {r.keys_checked:,} of {r.keys_expected:,} keys have windows; count mismatches "
        f"{r.count_mismatches}, sum mismatches {r.sum_mismatches} (largest relative sum error "
        f"{r.max_sum_error:.1e}); windows from two workers {r.split_windows}, rewritten "
        f"{r.rewritten_windows}; late records {r.late_records}; dead letters "
        + (", ".join(f"{n} {reason}" for reason, n in sorted(r.dead_letters.items())) or "0")
    )
    shown = ", ".join(r.keys_moved[:5]) + (", …" if len(r.keys_moved) > 5 else "")
    say(
        f"  migration: {len(r.keys_moved)} keys moved live ({shown}); chunks sent {r.chunks_sent}, "
        f"installed {r.chunks_installed} ({r.chunk_bytes:,} bytes), {r.held_records:,} records taken in "
        "by new owners before the state arrived; "
        f"{r.moves_expected - len(r.moves_missing)} of {r.moves_expected} pinned keys off their hash "
        f"home installed at their new worker"
        + (f"; missing: {', '.join(r.moves_missing[:5])}" if r.moves_missing else "")
    )
    if r.misplaced_steps or r.pending_keys or r.duplicate_chunks or r.unexpected_keys:
        say(
            f"  also: {r.misplaced_steps} steps outside their state partition, {r.pending_keys} keys "
            f"still waiting for a chunk, {r.duplicate_chunks} duplicate chunks, {r.unexpected_keys} "
            "keys the input never had"
        )
    if r.error:
        console.print(f"  [red]reduce error: {r.error}[/]", highlight=False)
    if r.spark_log:
        say(f"  Spark's own output: {r.spark_log}")
