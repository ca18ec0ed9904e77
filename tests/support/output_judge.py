"""Judging every row a reduce job wrote, against an independent reference.

Why every row and not the latest per key: a wrong row that a later one overwrote was still read by
whoever consumed the topic in between. The job's contract (docs/reduce.md, "Delivery and
corrections") allows exactly two reasons for a window to have several rows:

* a *replay* (a micro-batch run again after a crash) writes the same row again: same revision,
  same values;
* a *correction* (a late record counted, a partial state merged after a move) writes the window
  again with its revision one higher; a reader keeping the latest row per Kafka key ends at it.

So, per (key, window), in the order the rows were read (one Kafka key, one partition: write
order): revisions never go down, rows of one revision are identical, and the last row equals the
reference over the records the job counted, and counts every record of the window it left out
(``count + excluded_records`` = all the window's records).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from tests.support.reduce_reference import Expected

VALUE_FIELDS = ("count", "sum", "min", "max", "mean", "window_end", "excluded_records")


def rows_by_window(rows: Iterable[Mapping[str, Any]]) -> dict[tuple[str, int], list[Mapping[str, Any]]]:
    """Rows grouped by (key, window start), each group in read order."""
    grouped: dict[tuple[str, int], list[Mapping[str, Any]]] = defaultdict(list)
    for row in rows:
        grouped[(row["key"], row["window_start"])].append(row)
    return dict(grouped)


def judge(
    rows: Iterable[Mapping[str, Any]],
    counted: Expected,
    every: Expected | None = None,
    *,
    ignore_keys: Iterable[str] = (),
    compare: tuple[str, ...] = ("count", "sum", "min", "max", "mean", "window_end"),
) -> list[str]:
    """The problems found (empty: the rows are right).

    ``counted``: the reference over the records the job should have counted (all of them, minus
    those it dead-lettered); ``every``: over all records (None: the same as ``counted``, nothing
    left out). Keys in ``ignore_keys`` (a flush event's) are not judged.
    """
    every = counted if every is None else every
    skip = set(ignore_keys)
    grouped = {w: r for w, r in rows_by_window(rows).items() if w[0] not in skip}
    problems: list[str] = []
    for window in sorted(set(every) - set(grouped)):
        problems.append(f"{window}: no row")
    for window, history in grouped.items():
        if window not in every:
            problems.append(f"{window}: a row for a window with no records: {_short(history[-1])}")
            continue
        revisions = [int(r["revision"]) for r in history]
        if revisions != sorted(revisions):
            problems.append(f"{window}: revisions out of order {revisions}")
        by_revision: dict[int, Mapping[str, Any]] = {}
        for r in history:
            first = by_revision.setdefault(int(r["revision"]), r)
            if _values(first) != _values(r):
                problems.append(
                    f"{window}: two rows of revision {r['revision']}: {_short(first)} / {_short(r)}"
                )
        final = history[-1]
        total = every[window]["count"]
        if final["count"] + final["excluded_records"] != total:
            problems.append(
                f"{window}: final row counts {final['count']} + {final['excluded_records']} excluded, "
                f"the window has {total} records"
            )
        expected = counted.get(window)
        if expected is None:
            if final["count"] != 0:
                problems.append(f"{window}: every record was left out, yet the row counts {final['count']}")
        elif any(final[f] != expected[f] for f in compare):
            problems.append(f"{window}: final row {_short(final)}, reference {_short(expected)}")
    return problems


def _values(row: Mapping[str, Any]) -> tuple[Any, ...]:
    return (*(row.get(f) for f in VALUE_FIELDS), tuple(row.get("values") or ()))


def _short(row: Mapping[str, Any]) -> str:
    keep = ("count", "sum", "min", "max", "revision", "excluded_records", "worker", "epoch")
    return "{" + ", ".join(f"{k}={row[k]}" for k in keep if k in row) + "}"


def assert_rows_right(problems: list[str]) -> None:
    assert not problems, f"{len(problems)} problems, e.g. " + "; ".join(problems[:5])
