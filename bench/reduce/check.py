"""The correctness check: every contender wrote the same windows, with the same figures, as the input says.

Why it is part of the benchmark: a faster contender that drops or double-counts records is not
faster. The check is cheap (the outputs are read back once per run, the reference is one
``groupby`` over the backlog's arrays) and strong: window by window, count, sum, min, max and
mean must be equal (values are multiples of 1/4, so sums are exact in any order), against the
reference and between Ballast and the native query of the same round.

Which windows: those the run's last watermark closed (window end <= watermark), as both
contenders write a window once the watermark passes its end; the rest are still open.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from ballast.harness.events import Events

FIGURES = ("count", "sum", "min", "max")


def closed_reference(
    reference: pd.DataFrame,
    events: Events,
    window_ms: int,
    watermark_ms: int,
    key_watermarks: Mapping[str, int] | None = None,
) -> pd.DataFrame:
    """The reference windows a watermark closed, indexed by (key name, window start).

    ``key_watermarks``: Ballast closes a key's window by its worker's own event clock (the
    frontier rule), not by one watermark of the query; each key named there is judged by its
    worker's, any other by ``watermark_ms``."""
    ref = reference.reset_index()
    names = np.array([events.name(int(i)) for i in ref["id"].tolist()], dtype=object)
    bound = np.full(len(ref), watermark_ms, dtype=np.int64)
    if key_watermarks:
        bound = np.array([key_watermarks.get(n, watermark_ms) for n in names], dtype=np.int64)
    closed = (ref["window_start"].to_numpy() + window_ms <= bound)
    ref, names = ref[closed], names[closed]
    return pd.DataFrame(
        {f: ref[f].to_numpy() for f in FIGURES},
        index=pd.MultiIndex.from_arrays(
            [names, ref["window_start"].to_numpy()], names=["key", "window_start"]
        ),
    )


def worker_watermarks(results: pd.DataFrame, workers: list[dict]) -> tuple[dict[str, int], int]:
    """Each key's worker's last watermark (the worker from the key's own rows, the watermark from
    the workers' ``WorkerStats``), and the slowest worker's, for keys that wrote nothing."""
    last: dict[int, int] = {}
    for w in workers:
        last[w["worker"]] = max(last.get(w["worker"], 0), int(w["watermark_ms"]))
    slowest = min(last.values(), default=0)
    owner = results.groupby("key")["worker"].first() if len(results) else pd.Series(dtype=int)
    return {str(k): last.get(int(w), slowest) for k, w in owner.items()}, slowest


def latest(results: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """One row per (key, window start): its latest revision; and how many rows repeated a window."""
    ordered = results.sort_values("revision", kind="stable")
    repeated = int(ordered.duplicated(["key", "window_start"]).sum())
    last = ordered.drop_duplicates(["key", "window_start"], keep="last")
    return last.set_index(["key", "window_start"]), repeated


def compare(results: pd.DataFrame, expected: pd.DataFrame) -> dict:
    """Windows missing, unexpected and different between ``results`` (one run's rows) and ``expected``."""
    got, repeated = latest(results)
    both = got.index.intersection(expected.index)
    a, b = got.loc[both, list(FIGURES)], expected.loc[both, list(FIGURES)]
    differ = ~np.isclose(a.to_numpy(dtype=float), b.to_numpy(dtype=float), rtol=0, atol=0).all(axis=1)
    mean = got.loc[both, "mean"].to_numpy(dtype=float)
    mean_off = ~np.isclose(
        mean, b["sum"].to_numpy(dtype=float) / b["count"].to_numpy(dtype=float), rtol=1e-12
    )
    return {
        "windows": len(expected),
        "missing": len(expected.index.difference(got.index)),
        "unexpected": len(got.index.difference(expected.index)),
        "different": int(differ.sum() + mean_off.sum()),
        "repeated_rows": repeated,
        "excluded_records": int(results["excluded"].sum()) if len(results) else 0,
    }


def equal(report: dict) -> bool:
    return not (report["missing"] or report["unexpected"] or report["different"] or report["repeated_rows"])
