"""The throughput bench's correctness check judges Ballast's windows by each key's worker's clock."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from ballast.harness.events import Events
from bench.reduce.backlog import reference
from bench.reduce.check import closed_reference, compare, equal, worker_watermarks

pytestmark = pytest.mark.unit

W = 10


def _events() -> Events:
    # key 0 on worker 0, key 1 on worker 1; windows [0, 10), [10, 20), [20, 30) of each
    ids = np.array([0, 0, 0, 1, 1, 1])
    times = np.array([1, 12, 25, 3, 14, 27])
    return Events(ids=ids, values=np.arange(6, dtype=float), times=times)


def _rows(events: Events, keep: set[tuple[int, int]], worker: dict[int, int]) -> pd.DataFrame:
    ref = reference(events, W).reset_index()
    ref = ref[[(int(i), int(s)) in keep for i, s in zip(ref["id"], ref["window_start"], strict=True)]]
    return pd.DataFrame({
        "key": [events.name(int(i)) for i in ref["id"]], "window_start": ref["window_start"],
        "window_end": ref["window_start"] + W, "count": ref["count"], "sum": ref["sum"], "min": ref["min"],
        "max": ref["max"], "mean": ref["sum"] / ref["count"], "revision": 0, "excluded": 0,
        "worker": [worker[int(i)] for i in ref["id"]],
    })  # fmt: skip


def _check(results: pd.DataFrame, events: Events, workers: list[dict]) -> dict:
    per_key, slowest = worker_watermarks(results, workers)
    return compare(results, closed_reference(reference(events, W), events, W, slowest, per_key))


# worker 0's clock closed [0, 10) and [10, 20); worker 1's only [0, 10)
WORKERS = [{"worker": 0, "watermark_ms": 15}, {"worker": 0, "watermark_ms": 21},
           {"worker": 1, "watermark_ms": 11}]  # fmt: skip


def test_each_key_is_judged_by_its_own_workers_last_watermark() -> None:
    events = _events()
    written = _rows(events, {(0, 0), (0, 10), (1, 0)}, {0: 0, 1: 1})
    report = _check(written, events, WORKERS)
    assert equal(report) and report["windows"] == 3, report


def test_a_window_its_worker_closed_but_did_not_write_is_missing() -> None:
    events = _events()
    report = _check(_rows(events, {(0, 0), (1, 0)}, {0: 0, 1: 1}), events, WORKERS)
    assert report["missing"] == 1 and not equal(report), report


def test_a_window_written_before_its_worker_closed_it_is_unexpected() -> None:
    events = _events()
    report = _check(_rows(events, {(0, 0), (0, 10), (1, 0), (1, 10)}, {0: 0, 1: 1}), events, WORKERS)
    assert report["unexpected"] == 1 and not equal(report), report


def test_a_ballast_run_whose_query_declares_no_watermark_is_judged_by_its_workers() -> None:
    """Ballast's Spark progress carries no watermark (0): judged by it, every window it wrote
    would be unexpected, as the bench reported before."""
    from types import SimpleNamespace

    from bench.reduce.throughput import check_run

    events = _events()
    written = _rows(events, {(0, 0), (0, 10), (1, 0)}, {0: 0, 1: 1})
    run = SimpleNamespace(results=written, workers=WORKERS, batches=[{"watermark_ms": 0}])
    report = check_run(run, SimpleNamespace(events=events), reference(events, W), W)
    assert equal(report) and report["windows"] == 3, report
