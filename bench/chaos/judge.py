"""Every output row and every dead letter against the reference of what the campaign produced.

Pure (the ledger's columns, the matched letters, the rows and the keep-probabilities in; figures
out), so it is unit tested on rows made by hand. It shares no code with the reduce: windows are
``event_time - event_time % size`` (tumbling), counts and sums one ``groupby`` over the ledger.

**What a record is owed.** Every record the campaign produced and the broker acknowledged (the
stream, the skewed producer's, the junk; not the flush events) must end in one of three places:

* a **dead letter** that names it (a router's names its input position; a reduce's names the routed
  record whose envelope carries that position). A ``late`` letter's record is also counted in its
  window's row (``excluded_records``); a letter of any other reason (``too-late``, ``future``,
  ``malformed``…) means the record is in no row;
* its window's **row**, counted or excluded;
* **shed**: dropped by a router under a keep-probability below 1. A shed record is in no row and no
  letter; the row of its window accounts for it in its estimates (docs/results.md).

**Definitions** (per (key, window start) of the stream's and the skewed producer's records; the
window's *offered* count is its records minus those with a letter that keeps them out of rows; the
final row is the highest revision, the last read among equals):

* **records lost**: (a) a final row claiming ``exact`` whose ``count + excluded_records`` is below the
  offered count: the shortfall; (b) a window with no row at all whose offered records could not all
  have been shed: no keep below 1 was in force from ``margin`` before the window to ``reach`` after
  it, or the chance that every one was shed at the lowest keep in force then, ``(1 - p)^n``, is
  below ``miss_p`` (1e-6): all its offered records; (c) a junk record no letter names.
* **rows wrong**: a final row claiming ``exact`` that is not the reference exactly (``count`` =
  offered minus late, ``excluded_records`` = late, ``sum`` = the counted records' sum); any row,
  exact or not, counting more records than its window was offered; an earlier revision claiming
  exact with more; a row for a window that had no records; two rows of one revision that differ
  (a replay must write the same row).
* **false exact**: the final rows claiming ``exact`` that are not exactly right (each is also a row
  wrong, and its shortfall, if any, records lost).
* **late**: records with a ``late`` or ``too-late`` letter. The campaign never holds an input
  partition still for as long as the reduce's idle-partition timeout, so each is late because of
  a stall shorter than it: must be 0.
* **coverage**: over the shed windows (a final row that is not exact and reports an interval, and
  windows without a row that shedding explains, each a miss), the share whose interval holds the
  offered count (the sum: over windows without late records). A row that reports no interval
  ("no estimate is possible") is counted apart and must not claim more than was offered.

Windows that end after the reduce's last watermark were never due: their records are counted as
``unjudged`` (a run whose windows did not all close says so in its verdict).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from bench.chaos.ledger import DATA, JUNK, SKEWED, Records
from bench.chaos.readback import Letter

MISS_P = 1e-6
IN_ROWS = "late"  # the one reason whose record is still counted in its window's row
LATE = ("late", "too-late")
VALUE_COLUMNS = ("count", "sum", "excluded_records")


def keep_low(keeps: Sequence[dict[str, Any]], start_ms: int, end_ms: int) -> float:
    """The lowest keep-probability in force at any time in [start, end] (1.0 before any setting)."""
    low, current = 1.0, 1.0
    for point in keeps:
        if point["at_ms"] <= start_ms:
            current = float(point["keep"])
        elif point["at_ms"] <= end_ms:
            low = min(low, float(point["keep"]))
    return min(low, current)


def letter_classes(records: Records, letters: Sequence[Letter]) -> tuple[np.ndarray, dict[str, Any]]:
    """Per record: '' (no letter), 'late' (in its row too) or the reason that keeps it out of rows;
    and the letters' figures (by reason and stage, unmatched, conflicting)."""
    reasons: dict[int, set[str]] = {}
    unmatched: dict[str, int] = {}
    by: dict[str, int] = {}
    for d in letters:
        by[f"{d.stage}:{d.reason}"] = by.get(f"{d.stage}:{d.reason}", 0) + 1
        if d.record < 0:
            unmatched[d.reason] = unmatched.get(d.reason, 0) + 1
        else:
            reasons.setdefault(d.record, set()).add(d.reason)
    cls = np.full(len(records.kind), "", dtype=object)
    conflicting = 0
    for i, rs in reasons.items():
        if len(rs) > 1:
            conflicting += 1
        out = sorted(rs - {IN_ROWS})
        cls[i] = out[0] if out else IN_ROWS
    return cls, {
        "letters": len(letters),
        "by_stage_reason": dict(sorted(by.items())),
        "unmatched": unmatched,
        "records_with_conflicting_letters": conflicting,
    }


def windows(records: Records, cls: np.ndarray, window_ms: int) -> pd.DataFrame:
    """Per (key, window start) of the stream's and the skewed producer's records: records, late,
    kept out of rows, offered, and the sum of the records counted in rows."""
    use = records.delivered & np.isin(records.kind, [DATA, SKEWED])
    t = records.time[use]
    frame = pd.DataFrame(
        {
            "key": records.key[use],
            "window_start": t - t % window_ms,
            "value": records.value[use],
            "late": cls[use] == IN_ROWS,
            "out": (cls[use] != "") & (cls[use] != IN_ROWS),
        }
    )
    frame["counted_value"] = np.where(frame["late"] | frame["out"], 0.0, frame["value"])
    g = frame.groupby(["key", "window_start"], sort=True)
    out = pd.DataFrame(
        {
            "records": g.size(),
            "late": g["late"].sum(),
            "out": g["out"].sum(),
            "sum": g["counted_value"].sum(),
        }
    )
    out["offered"] = out["records"] - out["out"]
    return out


def final_rows(rows: pd.DataFrame) -> pd.DataFrame:
    ordered = rows.reset_index(drop=True).sort_values("revision", kind="stable")
    return ordered.drop_duplicates(["key", "window_start"], keep="last").set_index(["key", "window_start"])


def judge(
    records: Records,
    letters: Sequence[Letter],
    rows: pd.DataFrame,
    keeps: Sequence[dict[str, Any]],
    window_ms: int,
    judged_until_ms: int,
    margin_ms: int,
    reach_ms: int,
    miss_p: float = MISS_P,
    spans: Sequence[tuple[str, int, int]] = (),
) -> dict[str, Any]:
    """The run's figures (see the module docstring for every definition)."""
    cls, letter_figures = letter_classes(records, letters)
    truth = windows(records, cls, window_ms)
    starts = truth.index.get_level_values("window_start").to_numpy(dtype=np.int64)
    due = starts + window_ms <= judged_until_ms
    unjudged = truth[~due]
    truth = truth[due]

    rows = rows.copy()
    for c in ("count", "excluded_records", "revision", "window_start"):
        rows[c] = rows[c].astype(np.int64)
    replays = rows.groupby(["key", "window_start", "revision"])[list(VALUE_COLUMNS)].nunique()
    inconsistent = int((replays > 1).any(axis=1).sum()) if len(rows) else 0
    final = (
        final_rows(rows)
        if len(rows)
        else pd.DataFrame(columns=rows.columns).set_index(["key", "window_start"])
    )
    final = final[final.index.get_level_values("window_start") + window_ms <= judged_until_ms]
    both = truth.join(final, how="outer", rsuffix="_row")
    has_row = both["revision"].notna().to_numpy()
    has_truth = both["records"].notna().to_numpy()
    offered = _num(both, "offered").astype(np.int64)
    late_n = _num(both, "late").astype(np.int64)
    true_sum = _num(both, "sum")
    count = _num(both, "count").astype(np.int64)
    excluded = _num(both, "excluded_records").astype(np.int64)
    row_sum = _num(both, "sum_row")
    exact = has_row & both["exact"].eq(True).to_numpy()
    seen = count + excluded

    right = (count == offered - late_n) & (excluded == late_n) & (row_sum == true_sum)
    false_exact = exact & has_truth & ~right
    shortfall = np.where(false_exact & (seen < offered), offered - seen, 0)
    over = has_row & has_truth & (seen > offered)
    unexpected = has_row & ~has_truth

    # windows without a row: explained by shedding, or lost
    no_row = has_truth & ~has_row & (offered > 0)
    explained = np.zeros(len(both), dtype=bool)
    for i in np.flatnonzero(no_row):
        start = int(both.index[i][1])
        p = keep_low(keeps, start - margin_ms, start + window_ms + reach_ms)
        explained[i] = p < 1.0 and (1.0 - p) ** int(offered[i]) >= miss_p
    missing = no_row & ~explained

    early_over = 0
    if len(rows):
        exact_rows = rows[rows["exact"].astype(bool)].join(
            truth["offered"], on=["key", "window_start"], how="inner"
        )
        early_over = int(
            (exact_rows["count"] + exact_rows["excluded_records"] > exact_rows["offered"].fillna(0)).sum()
        )

    junk = records.delivered & (records.kind == JUNK)
    junk_unlettered = int((junk & (cls == "")).sum())
    lost = int(shortfall.sum()) + int(offered[missing].sum()) + junk_unlettered
    wrong_final = false_exact | over | unexpected
    late_records = int(np.isin(cls, LATE).sum())
    late_times = records.time[np.isin(cls, LATE)]
    skewed = records.delivered & (records.kind == SKEWED)

    coverage = _coverage(both, has_row, has_truth, exact, explained, offered, late_n, true_sum)
    examples = [
        {
            "key": str(k),
            "window_start": int(w),
            "offered": int(offered[i]),
            "late": int(late_n[i]),
            "count": int(count[i]),
            "excluded": int(excluded[i]),
            "exact": bool(exact[i]),
            "has_row": bool(has_row[i]),
        }
        for i, (k, w) in enumerate(both.index)
        if wrong_final[i] or missing[i]
    ][:10]
    return {
        "records": int((records.delivered & np.isin(records.kind, [DATA, SKEWED, JUNK])).sum()),
        "records_lost": lost,
        "rows_wrong": int(wrong_final.sum()) + early_over + inconsistent,
        "false_exact": int(false_exact.sum()),
        "late_records": late_records,
        "late_near_faults": _near(late_times, spans, window_ms + margin_ms),
        "lost_detail": {
            "exact_rows_short": int(shortfall.sum()),
            "windows_missing": int(missing.sum()),
            "records_in_missing_windows": int(offered[missing].sum()),
            "junk_without_letter": junk_unlettered,
        },
        "wrong_detail": {
            "false_exact": int(false_exact.sum()),
            "over_offered": int(over.sum()),
            "unexpected_windows": int(unexpected.sum()),
            "earlier_exact_over": early_over,
            "replays_differing": inconsistent,
        },
        "windows": int(has_truth.sum()),
        "rows": len(rows),
        "final_rows": int(has_row.sum()),
        "exact_windows": int(exact.sum()),
        "windows_without_row_shed": int(explained.sum()),
        "unjudged_windows": len(unjudged),
        "unjudged_records": int((unjudged["offered"]).sum()),
        "skewed": {
            "records": int(skewed.sum()),
            "letters": {r: int(((cls == r) & skewed).sum()) for r in sorted(set(cls[skewed]) - {""})},
            "without_letter": int(((cls == "") & skewed).sum()),
        },
        "junk": {"records": int(junk.sum()), "without_letter": junk_unlettered},
        "dead_letters": letter_figures,
        "coverage": coverage,
        "examples": examples,
    }


def _coverage(
    both: pd.DataFrame,
    has_row: np.ndarray,
    has_truth: np.ndarray,
    exact: np.ndarray,
    explained: np.ndarray,
    offered: np.ndarray,
    late_n: np.ndarray,
    true_sum: np.ndarray,
) -> dict[str, Any]:
    low = both["count_low"].to_numpy(dtype=float)
    high = both["count_high"].to_numpy(dtype=float)
    rowed = has_row & has_truth & ~exact
    interval = rowed & np.isfinite(low)
    opaque = rowed & ~np.isfinite(low)
    count_in = interval & (low <= offered) & (offered <= high)
    sums = interval & (late_n == 0)
    sum_in = (
        sums
        & (both["sum_low"].to_numpy(dtype=float) <= true_sum)
        & (true_sum <= both["sum_high"].to_numpy(dtype=float))
    )
    seen = _num(both, "count") + _num(both, "excluded_records")
    shed = int(interval.sum() + explained.sum())
    return {
        "shed_windows": shed,
        "with_interval": int(interval.sum()),
        "without_row": int(explained.sum()),
        "count": _share(int(count_in.sum()), shed),
        "count_with_row": _share(int(count_in.sum()), int(interval.sum())),
        "sum_with_row": _share(int(sum_in.sum()), int(sums.sum())),
        "no_estimate": int(opaque.sum()),
        "no_estimate_over": int((opaque & (seen > offered)).sum()),
    }


def _near(times: np.ndarray, spans: Sequence[tuple[str, int, int]], before_ms: int) -> dict[str, int]:
    """How many of ``times`` fall in each span (from ``before_ms`` before its start to its end), and
    how many in none: which fault a late record's event time points at."""
    out = {label: int(((times >= a - before_ms) & (times <= b)).sum()) for label, a, b in spans}
    hit = np.zeros(times.size, dtype=bool)
    for _, a, b in spans:
        hit |= (times >= a - before_ms) & (times <= b)
    out["none"] = int((~hit).sum())
    return out


def _num(frame: pd.DataFrame, column: str) -> np.ndarray:
    """A column as floats, a missing value as 0 (a window without a row, a row without a window)."""
    return pd.to_numeric(frame[column], errors="coerce").fillna(0.0).to_numpy(dtype=float)


def _share(hit: int, n: int) -> float | None:
    return round(hit / n, 4) if n else None
