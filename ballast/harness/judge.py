"""Every output row against the truth computed from the input that was produced.

Why in the harness: the shedding benchmark and the demo judge their results by the same rules.

Pure (frames in, figures out), so it is unit tested on rows made by hand.

The truth (:func:`truth`): per (key, window start), the count and sum of every record the feeder
produced, whatever the routers shed: what the window was *offered*, which is what a row's
``estimated_count`` and ``estimated_sum`` estimate (docs/results.md). Computed with one
``groupby`` over the feeder's own arrays, sharing nothing with the reduce.

Which truth a row is held to, and why:

* its **count**: ``estimated_count`` estimates every offered record of the window, counted or
  excluded as late (a late record is scaled by its own keep-probability too), so the truth is the
  window's whole offered count;
* its **sum**: ``estimated_sum`` is over the *counted* records only (a late record's value is in no
  aggregate). Which offered records would have been late had they been kept is not knowable, so a
  row with ``excluded_records > 0`` is left out of the sum's checks (and counted:
  ``sum_skipped_late``);
* a window's **final row** is its latest revision (a late record makes the reduce write a window
  again; every revision is a complete statement). Every row is read, not only the latest per
  Kafka key, and every row claiming ``exact`` is checked, earlier revisions included: an exact row
  counts every offered record it has seen, so it may not claim more than the truth
  (``count + excluded_records <= true count``), and a final exact row must equal it.

Shed windows: those whose final row is not exact, and those with no row at all while shedding was
in force (every record shed: docs/results.md, "Windows without a row"), which count as misses of
the interval. A window with no row outside shedding is an error (``missing_unshed``). A final row
claiming ``exact`` that misses records is counted (``exact_wrong``), and apart when its window lies
in the shedding span (``exact_wrong_in_span``): a window whose records drawn below 1 were all
dropped leaves the reduce only records kept with 1, and the row says exact while it is not.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ballast.harness.events import Events

ROW_FIELDS = (
    "key", "window_start", "revision", "count", "sum", "excluded_records", "exact", "sampled_records",
    "keep_probability", "estimated_count", "estimated_sum", "relative_error", "count_std_error",
    "sum_std_error", "count_low", "count_high", "sum_low", "sum_high",
)  # fmt: skip


def truth(events: Events, window_ms: int) -> pd.DataFrame:
    """Offered count and sum per (key, window start), indexed by both."""
    frame = pd.DataFrame(
        {"id": events.ids, "window_start": events.times - events.times % window_ms, "value": events.values}
    )
    grouped = frame.groupby(["id", "window_start"], sort=True)["value"].agg(["count", "sum"]).reset_index()
    names = np.array([events.name(int(i)) for i in grouped["id"].tolist()], dtype=object)
    grouped.index = pd.MultiIndex.from_arrays([names, grouped["window_start"].to_numpy()],
                                              names=["key", "window_start"])  # fmt: skip
    return grouped[["count", "sum"]].rename(columns={"count": "true_count", "sum": "true_sum"})


def final_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per (key, window start): its latest revision, indexed by both."""
    ordered = rows.sort_values("revision", kind="stable")
    return ordered.drop_duplicates(["key", "window_start"], keep="last").set_index(["key", "window_start"])


def judged(rows: pd.DataFrame, expected: pd.DataFrame, shed_from_ms: int | None,
           shed_until_ms: int | None, window_ms: int) -> pd.DataFrame:  # fmt: skip
    """One line per window of the truth or of the rows: the final row's figures beside the truth,
    and what it is judged to be (see the module docstring)."""
    final = (
        final_rows(rows) if len(rows) else pd.DataFrame(columns=ROW_FIELDS).set_index(["key", "window_start"])
    )
    both = final.join(expected, how="outer")
    starts = both.index.get_level_values("window_start").to_numpy(dtype=np.int64)
    has_row = both["revision"].notna().to_numpy()
    has_truth = both["true_count"].notna().to_numpy()
    exact = has_row & both["exact"].eq(True).to_numpy()
    # a window of the shedding span: some of its time lies in [shed_from, shed_until)
    in_span = np.zeros(len(both), dtype=bool)
    if shed_from_ms is not None:
        until = np.iinfo(np.int64).max if shed_until_ms is None else shed_until_ms
        in_span = (starts + window_ms > shed_from_ms) & (starts < until)
    out = pd.DataFrame(index=both.index)
    out["start"] = starts
    out["has_row"], out["has_truth"], out["exact"] = has_row, has_truth, exact
    out["shed"] = (has_row & ~exact) | (~has_row & has_truth & in_span)
    tc = both["true_count"].to_numpy(dtype=float)
    ts = both["true_sum"].to_numpy(dtype=float)
    seen = both["count"].to_numpy(dtype=float) + both["excluded_records"].to_numpy(dtype=float)
    late = both["excluded_records"].fillna(0).to_numpy(dtype=float) > 0
    est_c = both["estimated_count"].to_numpy(dtype=float)
    est_s = both["estimated_sum"].to_numpy(dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        out["count_error"] = np.where(has_row & has_truth, np.abs(est_c - tc) / tc, np.nan)
        out["sum_error"] = np.where(has_row & has_truth & ~late & (ts != 0), np.abs(est_s - ts) / np.abs(ts),
                                    np.nan)  # fmt: skip
    out["reported_error"] = both["relative_error"].to_numpy(dtype=float)
    out["count_in"] = (
        has_row
        & has_truth
        & (both["count_low"].to_numpy(dtype=float) <= tc)
        & (tc <= both["count_high"].to_numpy(dtype=float))
    )
    out["sum_in"] = (
        has_row
        & has_truth
        & (both["sum_low"].to_numpy(dtype=float) <= ts)
        & (ts <= both["sum_high"].to_numpy(dtype=float))
    )
    # a row that says no estimate is possible (no interval: docs/results.md, "When a row may say
    # exact"); it must still not claim more records than were offered
    out["no_estimate"] = has_row & ~exact & both["count_low"].isna().to_numpy()
    out["late"] = late
    out["in_span"] = in_span
    out["seen"], out["true_count"] = seen, tc
    out["exact_correct"] = (
        exact & has_truth & (seen == tc) & (late | (both["sum"].to_numpy(dtype=float) == ts))
    )
    out["keep"] = both["keep_probability"].to_numpy(dtype=float)
    return out


def coverage(lines: pd.DataFrame) -> dict[str, Any]:
    """Share of shed windows whose true count (sum) lies in the row's 95 % interval; a shed window
    without a row is a miss of both, a row with late records is left out of the sum's share.

    A row that says no estimate is possible reports no interval, so it is not in the shares: it is
    counted apart (``no_estimate``), with how many of them claimed more records than the truth
    (``no_estimate_over``: must be 0, what was seen is a floor)."""
    opaque = lines[lines["shed"] & lines["has_truth"] & lines["no_estimate"]]
    shed = lines[lines["shed"] & lines["has_truth"] & ~lines["no_estimate"]]
    sums = shed[~shed["late"]]
    rowed = shed[shed["has_row"]]
    rowed_sums = rowed[~rowed["late"]]
    return {
        "shed_windows": len(shed),
        "no_estimate": len(opaque),
        "no_estimate_over": int((opaque["seen"] > opaque["true_count"]).sum()),
        "without_row": int((~shed["has_row"]).sum()),
        "count": round(float(shed["count_in"].mean()), 4) if len(shed) else None,
        "sum": round(float(sums["sum_in"].mean()), 4) if len(sums) else None,
        "sum_windows": len(sums),
        "sum_skipped_late": len(shed) - len(sums),
        # the shares among shed windows that have a row with an interval: what a reader of the rows
        # can check (a window whose every record was shed has no row, so no interval to hold its truth)
        "count_with_row": round(float(rowed["count_in"].mean()), 4) if len(rowed) else None,
        "sum_with_row": round(float(rowed_sums["sum_in"].mean()), 4) if len(rowed_sums) else None,
    }


def checks(rows: pd.DataFrame, lines: pd.DataFrame, expected: pd.DataFrame) -> dict[str, Any]:
    """What must hold whatever was shed: no window missing outside shedding, none unexpected, every
    exact row right (earlier revisions never above the truth)."""
    over = 0
    if len(rows):
        early = rows[rows["exact"].astype(bool)].join(expected, on=["key", "window_start"])
        over = int((early["count"] + early["excluded_records"] > early["true_count"].fillna(0)).sum())
    exact_rows = lines[lines["exact"]]
    wrong = exact_rows[~exact_rows["exact_correct"]]
    return {
        "rows": len(rows),
        "windows": int(lines["has_truth"].sum()),
        "revised_windows": int(rows.duplicated(["key", "window_start"]).sum()) if len(rows) else 0,
        "missing_unshed": int((~lines["has_row"] & lines["has_truth"] & ~lines["shed"]).sum()),
        "unexpected": int((lines["has_row"] & ~lines["has_truth"]).sum()),
        "exact_windows": len(exact_rows),
        "exact_wrong": len(wrong),
        # an exact row of the shedding span that misses records: every record of it the routers drew
        # with a keep below 1 was dropped, so the reduce saw only records kept with 1
        "exact_wrong_in_span": int(wrong["in_span"].sum()),
        "exact_wrong_examples": [
            {
                "key": str(k),
                "window_start": int(w),
                "seen": int(x["seen"]),
                "true_count": int(x["true_count"]),
            }
            for (k, w), x in wrong.head(10).iterrows()
        ],
        "exact_rows_over_truth": over,
        "late_rows": int(lines["late"].sum()),
    }


def over_time(lines: pd.DataFrame) -> list[dict[str, Any]]:
    """Per window start: windows, shed share, the estimates' median relative error against the truth
    (count, sum), the mean error the rows reported, and the share of shed windows covered."""
    out = []
    for start, g in lines[lines["has_truth"]].groupby("start", sort=True):
        shed = g[g["shed"]]
        out.append({
            "window_start": int(start),
            "windows": len(g),
            "shed": len(shed),
            "exact": int(g["exact"].sum()),
            "count_error_p50": _round(g["count_error"].median()),
            "count_error_max": _round(g["count_error"].max()),
            "sum_error_p50": _round(g["sum_error"].median()),
            "reported_error_mean": _round(g["reported_error"].mean()),
            "count_covered": _round(shed["count_in"].mean()) if len(shed) else None,
            "keep_p50": _round(g["keep"].median()),
        })  # fmt: skip
    return out


def first_exact_start(lines: pd.DataFrame) -> int | None:
    """The start of the first window from which on every window has a final row that is exact and
    equals the truth (None: the last window is not)."""
    per_start = lines[lines["has_truth"]].groupby("start", sort=True)["exact_correct"].all()
    first = None
    for start, ok in zip(per_start.index.tolist()[::-1], per_start.tolist()[::-1], strict=True):
        if not ok:
            break
        first = int(start)
    return first


def _round(x: Any, digits: int = 5) -> float | None:
    return None if x is None or not np.isfinite(x) else round(float(x), digits)
