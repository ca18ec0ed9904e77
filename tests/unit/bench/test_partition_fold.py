"""The partition stage's fold against a plain reference: windows, late records, closing, replays."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from bench.reduce.partition_fold import PartitionState, closed_rows, fold, open_min_end

pytestmark = pytest.mark.unit

W = 10


def _run(state: PartitionState, batch: int, events: list[tuple[str, float, int]], watermark: int):
    keys = np.array([e[0] for e in events], dtype=object)
    values = np.array([e[1] for e in events], dtype=float)
    times = np.array([e[2] for e in events], dtype=np.int64)
    return fold(state, batch, keys, values, times, watermark, W)


def _rows(closed: pd.DataFrame) -> dict[tuple[str, int], tuple]:
    out = closed_rows(closed, W)
    return {(r.key, r.window_start): (r.window_end, r.count, r.sum, r.min, r.max, r.mean)
            for r in out.itertuples()}  # fmt: skip


def test_windows_close_once_late_records_are_dropped_and_a_replay_changes_nothing():
    s = PartitionState()
    s, step = _run(s, 0, [("a", 1.0, 1), ("a", 2.0, 5), ("b", 3.0, 12)], 0)
    assert _rows(step.closed) == {} and step.late == 0 and step.max_event_ms == 12
    assert open_min_end(s, W) == 10
    # watermark 5: a record at 3 is older than it but its window [0, 10) is open: counted
    s, step = _run(s, 1, [("a", 4.0, 3), ("a", 5.0, 15), ("b", 6.0, 25)], 5)
    assert _rows(step.closed) == {} and step.late == 0 and step.max_event_ms == 25
    assert sorted(step.changed.index) == [("a", 0), ("a", 10), ("b", 20)]
    assert step.changed.loc[("a", 0)].tolist() == [3, 7.0, 1.0, 4.0]
    # watermark 20 closes every window ending at or before 20; records of those windows are late
    s, step = _run(s, 2, [("a", 100.0, 8), ("b", 100.0, 19), ("a", 7.0, 22)], 20)
    expected = {
        ("a", 0): (10, 3, 7.0, 1.0, 4.0, 7.0 / 3),
        ("a", 10): (20, 1, 5.0, 5.0, 5.0, 5.0),
        ("b", 10): (20, 1, 3.0, 3.0, 3.0, 3.0),
    }
    assert _rows(step.closed) == expected
    assert step.late == 2 and step.max_event_ms == 25
    assert sorted(step.removed) == [("a", 0), ("a", 10), ("b", 10)]
    assert sorted(s.table.index) == [("a", 20), ("b", 20)]
    # batch 2 again (a task retried after it saved): the same windows, the state untouched
    again, replay = _run(s, 2, [("a", 100.0, 8), ("b", 100.0, 19), ("a", 7.0, 22)], 20)
    assert replay.replay and again is s
    assert _rows(replay.closed) == expected and replay.late == 2 and len(replay.changed) == 0
    # no records: the watermark alone closes the rest
    s, step = _run(s, 3, [], 40)
    assert _rows(step.closed) == {
        ("a", 20): (30, 1, 7.0, 7.0, 7.0, 7.0),
        ("b", 20): (30, 1, 6.0, 6.0, 6.0, 6.0),
    }
    assert len(s.table) == 0 and open_min_end(s, W) is None and s.late_total == 2
    with pytest.raises(ValueError):
        _run(s, 1, [], 40)


def test_random_batches_match_a_plain_groupby_of_the_records_that_were_on_time():
    rng = np.random.default_rng(3)
    s = PartitionState()
    written: list[pd.DataFrame] = []
    kept: list[tuple[str, float, int]] = []
    late = 0
    watermark = 0
    high = 0
    for batch in range(30):
        n = int(rng.integers(0, 200))
        times = high - 40 + rng.integers(0, 60, size=n)  # some records behind the watermark
        events = [(f"k{int(rng.integers(0, 7))}", float(rng.integers(0, 40)) / 4, int(t)) for t in times]
        s, step = _run(s, batch, events, watermark)
        if batch % 5 == 0:  # every fifth batch is given twice: nothing may change
            s2, again = _run(s, batch, events, watermark)
            assert again.replay and s2 is s and again.closed.equals(step.closed)
        written.append(closed_rows(step.closed, W))
        for key, value, t in events:  # the reference: a record counts unless its window had closed
            if (t // W) * W + W <= watermark:
                late += 1
            else:
                kept.append((key, value, t))
        high = max([high, *(int(t) for t in times)])
        watermark = max(watermark, high - 15)
    s, step = _run(s, 30, [], 10**9)  # close the rest
    written.append(closed_rows(step.closed, W))
    got = pd.concat(written)
    assert not got.duplicated(["key", "window_start"]).any()
    ref = pd.DataFrame(kept, columns=["key", "value", "t"])
    ref["window_start"] = (ref["t"] // W) * W
    exp = ref.groupby(["key", "window_start"])["value"].agg(["count", "sum", "min", "max"])
    got = got.set_index(["key", "window_start"]).sort_index()
    assert list(got.index) == list(exp.index)
    for f in ("count", "sum", "min", "max"):
        assert got[f].tolist() == exp[f].tolist(), f
    assert np.allclose(got["mean"], exp["sum"] / exp["count"], rtol=1e-12, atol=0)
    assert (got["window_end"] == got.index.get_level_values(1) + W).all()
    assert s.late_total == late and late > 0
