"""Results that state their error: the engine's Horvitz–Thompson estimates under load shedding.

The ground truth is the test's own: it generates every offered record, keeps each with the
probability its own table of the log's settings gives (the settings of the record's epoch: its
topic's, else ``*``, else 1), feeds the engine only the survivors, and compares each window's
interval with what the window was offered. Every row a step emits is read, not the latest per key.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest

from ballast.routing.murmur2 import kafka_partition
from spark_jobs.processors.aggregate import WindowAggregate
from spark_jobs.processors.batch import PerKeyAdapter, Results
from spark_jobs.processors.last_values import LastValues
from spark_jobs.processors.sampling import estimate
from spark_jobs.processors.windows import WindowSpec
from spark_jobs.reduce.ownership import OwnershipView
from tests.support.engine_rows import N, Worker, chunk_row, data, genesis, marker, shedding
from tests.support.reduce_reference import window_starts

TOPICS = ("clicks", "views")
PARTITIONS = ("clicks:0", "views:0")


def keys_at(worker: int, count: int, prefix: str = "k") -> list[str]:
    found = (f"{prefix}{i}" for i in range(100_000))
    return [k for k in found if kafka_partition(k.encode(), N) == worker][:count]


def view_of(*events) -> OwnershipView:
    view = OwnershipView(N)
    view.apply(genesis())
    for e in events:
        view.apply(e)
    return view


def all_rows(results: list[Results]) -> Results:
    return Results.concat(results)


# --- acceptance: the true count and sum fall inside the 95 % interval in 90-99 % of windows ----------

# the log the routers follow: (epoch, target, keep-probability), one event per epoch
LOG = [
    (1, "*", 0.6),
    (2, "clicks", 0.4),  # views still 0.6 (from *)
    (3, "*", 0.9),  # clicks keeps its own 0.4, views 0.9
    (4, "views", 0.3),
    (5, "clicks", 0.8),
    (6, "*", 0.25),  # both have their own: no change
    (7, "clicks", 1.0),
    (8, "views", 0.5),
]
SEGMENT_MS = 7_300  # routers adopt the next epoch every 7.3 s of event time: windows span changes
LAG_MS = {"clicks": 5_800, "views": 3_800}  # the views router adopts each epoch 2 s after clicks'


def offered_records(seed: int, keys: list[str], windows: int, size_ms: int) -> dict[str, np.ndarray]:
    """Every record the windows were offered: per key and window 20-150 records, each of a random
    input topic, gamma-distributed values (skewed, as amounts are; multiples of 1/8, so any order
    of addition gives the same sum) routed under the epoch its topic's router was at."""
    rng = np.random.default_rng(seed)
    per = rng.integers(20, 151, size=(len(keys), windows))
    n = int(per.sum())
    key_index = np.repeat(np.arange(len(keys)).repeat(windows), per.ravel())
    window = np.repeat(np.tile(np.arange(windows), len(keys)), per.ravel())
    t = window * size_ms + rng.integers(0, size_ms, size=n)
    topic = np.array(TOPICS, dtype=object)[rng.integers(0, 2, size=n)]
    lag = np.array([LAG_MS[x] for x in topic.tolist()])
    return {
        "key": np.array(keys, dtype=object)[key_index],
        "t": t,
        "value": np.round(rng.gamma(2.0, 10.0, size=n) * 8) / 8,
        "topic": topic,
        "epoch": np.minimum((t + lag) // SEGMENT_MS, len(LOG)),
    }


def keep_table() -> dict[tuple[str, int], float]:
    """The test's own reading of LOG: the probability a record of (topic, epoch) was kept with."""
    settings: dict[str, float] = {}
    table = {(topic, 0): 1.0 for topic in TOPICS}
    for epoch, target, p in LOG:
        settings[target] = p
        for topic in TOPICS:
            table[(topic, epoch)] = settings.get(topic, settings.get("*", 1.0))
    return table


def run_engine(processor, records: dict[str, np.ndarray], kept: np.ndarray, batch: int) -> list[Results]:
    """The survivors in event-time order through one worker, in micro-batches, the watermark one
    window behind; then a last step closes every window. Every step's results are returned.

    As routers do, each batch ends with a marker reporting the records dropped so far (whole
    seconds of their event times, per topic, with the keep-probability they were dropped under)."""
    from ballast.control.state import make_event

    view = view_of(*(make_event(e, "SHEDDING", {"target": tg, "keep_probability": p, "reason": ""})
                     for e, tg, p in LOG))  # fmt: skip
    worker = Worker(0, view, processor, partitions=PARTITIONS)
    idx = np.flatnonzero(kept)
    idx = idx[np.argsort(records["t"][idx], kind="stable")]
    table = keep_table()
    dropped = np.flatnonzero(~kept)
    dropped = dropped[np.argsort(records["t"][dropped], kind="stable")]
    reported = 0
    out = []
    size = processor.windows.size_ms
    for lo in range(0, idx.size, batch):
        part = idx[lo : lo + batch]
        rows = [
            data(str(records["key"][i]), float(records["value"][i]), int(records["t"][i]),
                 int(records["epoch"][i]), str(records["topic"][i]))
            for i in part.tolist()
        ]  # fmt: skip
        upto = int(np.searchsorted(records["t"][dropped], records["t"][part[-1]], side="right"))
        spans: dict[tuple[str, int], float] = {}
        for i in dropped[reported:upto].tolist():
            topic, second = str(records["topic"][i]), int(records["t"][i]) // 1000
            keep = table[(topic, int(records["epoch"][i]))]
            spans[(topic, second)] = min(keep, spans.get((topic, second), 1.0))
        reported = upto
        shed = [(topic, s * 1000, s * 1000 + 999, keep) for (topic, s), keep in sorted(spans.items())]
        rows.append(marker(0, 0, *PARTITIONS, shed=shed))
        watermark = max(int(records["t"][part[0]]) - size, 0)
        out.append(worker.step(rows, watermark=watermark).results)
    out.append(worker.step([], watermark=int(records["t"].max()) + 10 * size).results)
    return out


@pytest.mark.parametrize(
    "processor",
    [
        WindowAggregate(WindowSpec(1000)),
        WindowAggregate(WindowSpec(2000, 1000)),
        LastValues(3, WindowSpec(1000)),
    ],
    ids=["aggregate", "aggregate-sliding", "last-values"],
)
def test_the_95_percent_interval_holds_the_truth_in_90_to_99_percent_of_windows(processor) -> None:
    keys = keys_at(0, 24)
    windows = 60
    records = offered_records(11, keys, windows, 1000)
    table = keep_table()
    p = np.array([table[(t, int(e))] for t, e in zip(records["topic"], records["epoch"], strict=True)])
    kept = np.random.default_rng(12).random(p.size) < p

    # the truth, from every offered record (windows by their definition, tests.support.reduce_reference):
    # per (key, window start) its count and sum, and whether any of its records could be shed
    truth: dict[tuple[str, int], list[float]] = defaultdict(lambda: [0, 0.0])
    shed: dict[tuple[str, int], bool] = defaultdict(bool)
    spec = processor.windows
    for key, t, value, keep in zip(records["key"], records["t"], records["value"], p, strict=True):
        for start in window_starts(int(t), spec.size_ms, spec.slide_ms):
            cell = truth[(str(key), start)]
            cell[0] += 1
            cell[1] += float(value)
            shed[(str(key), start)] |= bool(keep < 1.0)

    rows = all_rows(run_engine(processor, records, kept, batch=4000))
    est = estimate(rows.count, rows.sum, rows.excluded, rows.terms)
    seen: set[tuple[str, int]] = set()
    count_in = sum_in = unshed_opaque = unshed_exact = 0
    for i, (key, start) in enumerate(zip(rows.key.tolist(), rows.window_start.tolist(), strict=True)):
        window = (key, start)
        assert window not in seen, f"window {window} written twice"
        seen.add(window)
        n, s = truth[window]
        if est.exact[i]:  # never a false exact: the interval is the point, and the truth
            assert not shed[window] and (rows.count[i], rows.sum[i]) == (n, s)
            assert est.count_low[i] == est.count_high[i] == n and est.sum_low[i] == est.sum_high[i] == s
            unshed_exact += 1
            continue
        if not shed[window]:
            # nothing of it could be shed, but records of other keys in the same seconds were
            # dropped (a report is per worker, not per key): what it saw, and no estimate
            assert est.sampled[i] == 0 and (rows.count[i], rows.sum[i]) == (n, s)
            assert est.estimated_count[i] == n and np.isinf(est.relative_error[i])
            unshed_opaque += 1
            continue
        assert not est.exact[i]
        count_in += est.count_low[i] <= n <= est.count_high[i]
        sum_in += est.sum_low[i] <= s <= est.sum_high[i]
    sampled_windows = sum(shed.values())
    assert sampled_windows >= 1000 and seen <= set(truth)
    unshed = len(seen) - sum(shed[w] for w in seen)
    assert unshed_opaque + unshed_exact == unshed and unshed_exact > 0  # the windows before any shed
    # a window whose every record was shed has no row: it counts as a miss
    count_coverage, sum_coverage = count_in / sampled_windows, sum_in / sampled_windows
    assert 0.90 <= count_coverage <= 0.99, count_coverage
    assert 0.90 <= sum_coverage <= 0.99, sum_coverage
    # unbiased: over all windows the estimated total is close to the true one (0.3 % here)
    true_count = sum(c for c, _ in truth.values())
    true_sum = sum(s for _, s in truth.values())
    assert abs(est.estimated_count.sum() / true_count - 1) < 0.01
    estimated = np.isfinite(est.estimated_sum)  # a row with no estimate: the truth, as checked above
    assert abs((est.estimated_sum[estimated].sum() + rows.sum[~estimated].sum()) / true_sum - 1) < 0.01


# --- no shedding: exact, and the same as a log that never shed ----------------------------------

AGG = WindowAggregate(WindowSpec(100))
K, OTHER = keys_at(0, 2, "s")


def _plain_run(view: OwnershipView) -> tuple[list[Results], dict[int, bytes]]:
    w = Worker(0, view, AGG)
    out = [w.step([marker(view.epoch, 0), data(K, 1.5, 10, 0), data(K, 2.0, 20, view.epoch)]).results]
    out.append(w.step([data(OTHER, 4.0, 130, view.epoch)], watermark=100).results)
    out.append(w.step([data(K, 8.0, 30, view.epoch)], watermark=150).results)  # late: excluded
    out.append(w.step([], watermark=500).results)
    return out, dict(w.store.buckets)


def test_without_shedding_results_are_exact_and_unchanged() -> None:
    """A SHEDDING setting for another topic changes nothing for this job's topic: the same rows,
    the same stored bytes (no sampling columns stored), and every row exact: estimates equal what
    was seen (excluded records included in the count), errors 0, intervals points."""
    never, never_state = _plain_run(view_of())
    other, other_state = _plain_run(view_of(shedding(1, "another-topic", 0.5)))
    assert never_state == other_state
    a, b = all_rows(never), all_rows(other)
    assert len(a) == 3  # K's window, its correction (the late record), OTHER's window
    for name in ("key", "window_start", "count", "sum", "min", "max", "revision", "excluded"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    assert a.terms is None and b.terms is None
    est = estimate(b.count, b.sum, b.excluded, b.terms)
    seen = b.count + b.excluded
    assert est.exact.all() and (est.sampled == 0).all()
    assert np.array_equal(est.estimated_count, seen) and np.array_equal(est.estimated_sum, b.sum)
    assert (
        (est.count_std_error == 0).all()
        and (est.sum_std_error == 0).all()
        and (est.relative_error == 0).all()
    )
    assert np.array_equal(est.count_low, seen) and np.array_equal(est.count_high, seen)
    assert np.array_equal(est.sum_low, b.sum) and np.array_equal(est.sum_high, b.sum)
    assert (est.keep_probability == 1.0).all()


# --- a window spanning changes of the keep-probability ---------------------------------------------


def test_a_window_spanning_two_changes_scales_each_record_by_its_own_epoch() -> None:
    """Window [0, 100) of K: records routed under epoch 0 (kept for sure), 1 (p = 1/2) and 2
    (p = 1/4); then a record of epoch 2 arrives late and is counted as excluded, standing for 4.
    Estimates by hand: each record stands for 1/p, variances add (1 - p)/p^2 per record."""
    view = view_of(shedding(1, "in", 0.5), shedding(2, "in", 0.25))
    w = Worker(0, view, AGG)
    first = w.step(
        [
            marker(2, 0),
            data(K, 1.0, 10, 0),
            data(K, 2.0, 11, 0, "in"),
            data(K, 4.0, 12, 1),
            data(K, 4.0, 13, 1, "in"),
            data(K, 8.0, 14, 1),
            data(K, 16.0, 15, 2),
            data(K, 32.0, 16, 2, "in"),
        ],
        watermark=0,
    )
    assert len(first.results) == 0
    emitted = w.step([], watermark=100).results
    corrected = w.step([data(K, 64.0, 17, 2)], watermark=150).results  # late: excluded, p = 1/4
    rows = all_rows([emitted, corrected])
    est = estimate(rows.count, rows.sum, rows.excluded, rows.terms)
    assert (
        rows.revision.tolist() == [0, 1]
        and rows.count.tolist() == [7, 7]
        and rows.excluded.tolist() == [0, 1]
    )
    assert est.sampled.tolist() == [5, 6]
    assert est.estimated_count.tolist() == [2 + 3 * 2 + 2 * 4, 2 + 3 * 2 + 2 * 4 + 4]
    assert est.estimated_sum.tolist() == [3 + 2 * 16 + 4 * 48] * 2  # a late record is in no sum
    var_count = [3 * 0.5 / 0.25 + 2 * 0.75 / 0.0625, 3 * 0.5 / 0.25 + 3 * 0.75 / 0.0625]
    var_sum = 0.5 / 0.25 * (16 + 16 + 64) + 0.75 / 0.0625 * (256 + 1024)
    assert np.allclose(est.count_std_error**2, var_count) and np.allclose(est.sum_std_error**2, var_sum)
    assert est.keep_probability.tolist() == [7 / 16, 8 / 20]
    t = [2.776445105, 2.570581836]  # Student's 97.5 % quantile, 4 and 5 degrees of freedom
    assert np.allclose(est.count_high, [16 + t[0] * np.sqrt(30), 20 + t[1] * np.sqrt(42)])
    assert est.count_low.tolist() == [7, 8]  # never below the records seen
    assert np.allclose(est.sum_low, 227 - np.array(t) * np.sqrt(var_sum))
    assert not est.exact.any()


# --- state that moves: partial states, held records, old chunks -----------------------------------

MOVE_VIEW = [shedding(1, "in", 0.5), None, shedding(3, "in", 0.25)]  # epoch 2: K moves 0 -> 1
RECORDS = [(1.0, 10, 0), (2.0, 20, 1), (3.0, 30, 1), (4.0, 40, 2), (5.0, 50, 3), (6.0, 60, 3)]


def _log(move: bool) -> OwnershipView:
    from ballast.control.state import make_event

    second = (
        make_event(2, "ROUTING_UPDATE", {"assign": {K: 1}, "unassign": [], "reason": ""})
        if move
        else shedding(2, "another-topic", 0.5)  # an epoch that changes nothing for K
    )
    return view_of(MOVE_VIEW[0], second, MOVE_VIEW[2])


@pytest.mark.parametrize("processor", [AGG, LastValues(2, WindowSpec(100))], ids=["merged", "held"])
def test_estimates_of_a_key_that_moved_mid_window_equal_those_of_no_move(processor) -> None:
    """K's records of epochs 0-1 are at worker 0, those of epochs 2-3 reach worker 1 before K's
    state does (a partial state to merge, or records held and replayed): the window's estimates
    equal one worker's that saw every record, and the hand count."""
    view = _log(move=True)
    w0, w1 = Worker(0, view, processor), Worker(1, view, processor)
    w0.step([marker(0, 0), *[data(K, v, t, e) for v, t, e in RECORDS if e < 2], marker(1, 0)])
    early = w1.step([marker(2, 1), marker(3, 1), *[data(K, v, t, e) for v, t, e in RECORDS if e >= 2]])
    assert early.stats["pending_keys"] == 1
    shipped = w0.step([marker(2, 0)])
    moved = all_rows([w1.step([chunk_row(c) for c in shipped.chunks], watermark=500).results])

    still = Worker(0, _log(move=False), processor)
    still.step([marker(0, 0), *[data(K, v, t, e) for v, t, e in RECORDS]])
    stayed = all_rows([still.step([], watermark=500).results])

    a, b = (estimate(r.count, r.sum, r.excluded, r.terms) for r in (moved, stayed))
    assert len(moved) == len(stayed) == 1
    for field in ("estimated_count", "estimated_sum", "count_std_error", "sum_std_error", "sampled"):
        assert np.allclose(getattr(a, field), getattr(b, field)), field
    assert a.estimated_count.tolist() == [1 + 3 * 2 + 2 * 4] and a.estimated_sum.tolist() == [
        1 + 2 * 9 + 4 * 11
    ]


def test_a_chunk_from_before_the_sampling_columns_merges_as_kept_for_sure() -> None:
    """The old owner ran the previous version: its chunk of K's window is a table without the
    sampling columns. The new owner took in shed records meanwhile: the merged row counts the old
    records as seen (p = 1) and scales only its own."""
    from spark_jobs.reduce.contract import ChunkOut

    view = view_of(shedding(1, "in", 0.5), make_update(2, {K: 1}))
    w1 = Worker(1, view, AGG)
    w1.step([marker(2, 1), data(K, 4.0, 40, 2), data(K, 8.0, 50, 2)])
    from tests.support.old_formats import aggregate_rows_v1

    old = aggregate_rows_v1([K], [0], [3], [6.0], [1.0], [3.0])
    out = w1.step([chunk_row(ChunkOut(K, 2, 0, 1, 0, 1, old))], watermark=500)
    rows = out.results
    est = estimate(rows.count, rows.sum, rows.excluded, rows.terms)
    assert (rows.count.tolist(), rows.sum.tolist(), rows.min.tolist()) == ([5], [18.0], [1.0])
    assert (est.estimated_count.tolist(), est.estimated_sum.tolist(), est.sampled.tolist()) == (
        [7],
        [30.0],
        [2],
    )


def test_a_bucket_stored_before_the_sampling_columns_keeps_counting() -> None:
    """A worker restarted on a checkpoint of the previous version: its stored bucket loads, and
    shed records folded into it are scaled while the stored ones count as seen."""
    from spark_jobs.reduce.worker_meta import Bucket, WorkerMeta
    from tests.support.old_formats import aggregate_rows_v1

    w = Worker(0, view_of(shedding(1, "in", 0.25)), AGG)
    blob = aggregate_rows_v1([K], [0], [2], [3.0], [1.0], [2.0])
    w.store.buckets[0] = blob
    w.meta = WorkerMeta(buckets={0: Bucket(due=100, expire=1100, rows=1, stored_bytes=len(blob))})
    w.step([data(K, 4.0, 50, 1)])
    rows = w.step([], watermark=500).results
    est = estimate(rows.count, rows.sum, rows.excluded, rows.terms)
    assert (rows.count.tolist(), est.estimated_count.tolist(), est.estimated_sum.tolist()) == (
        [3],
        [6],
        [19.0],
    )


def make_update(epoch: int, pins: dict[str, int]):
    from ballast.control.state import make_event

    return make_event(epoch, "ROUTING_UPDATE", {"assign": pins, "unassign": [], "reason": ""})


# --- a per-key processor: no window the engine can see ---------------------------------------------


def test_a_per_key_processor_says_no_estimate_is_possible_once_its_key_saw_shedding() -> None:
    """The engine cannot attribute a per-key processor's records to windows: a row built while a
    keep-probability below 1 was in force (here from epoch 1, over K's whole run) is not exact,
    states the lowest keep-probability, and has no estimated sum or interval. Without shedding in
    the log its rows are exact."""
    adapter = PerKeyAdapter(WindowAggregate(WindowSpec(100)))
    shed = Worker(0, view_of(shedding(1, "in", 0.5)), adapter)
    shed.step([marker(1, 0), data(K, 1.0, 10, 1), data(K, 2.0, 20, 1)])
    rows = shed.step([], watermark=500).results
    est = estimate(rows.count, rows.sum, rows.excluded, rows.terms)
    assert not est.exact[0] and est.keep_probability[0] == 0.5 and np.isinf(est.relative_error[0])
    assert np.isnan(est.estimated_sum[0]) and np.isnan(est.count_low[0]) and np.isnan(est.sum_high[0])
    assert est.estimated_count[0] == 2  # what was seen

    plain = Worker(0, view_of(), adapter)
    plain.step([marker(0, 0), data(K, 1.0, 10, 0)])
    rows = plain.step([], watermark=500).results
    assert estimate(rows.count, rows.sum, rows.excluded, rows.terms).exact.all()


# --- a window whose shed records were all dropped ---------------------------------------------------


def test_a_window_whose_shed_records_were_all_dropped_is_not_exact() -> None:
    """K's records of window [1100, 1200) routed under p = 1/2 were all dropped (the router says
    so); the worker sees one of K's records there kept for sure (a router still at epoch 0).
    Nothing it saw was sampled, yet the window lost records: not exact, the lowest keep reported,
    no estimate (as a per-key processor's row). OTHER's window at the same time has sampled
    records and keeps its Horvitz–Thompson estimates. Windows no report overlaps are exact, while
    the log sheds or after."""
    view = view_of(shedding(1, "in", 0.5), shedding(2, "in", 1.0))
    w = Worker(0, view, AGG)
    w.step(
        [
            marker(2, 0),
            data(K, 2.0, 1150, 0),  # kept for sure; K's epoch-1 records of this window: all dropped
            data(OTHER, 3.0, 1150, 1),  # kept with p = 1/2
            marker(2, 0, shed=[("in", 1100, 1199, 0.5)]),
            data(K, 6.0, 2250, 2),
            data(K, 7.0, 750, 0),
        ]
    )
    rows = w.step([], watermark=5000).results
    est = estimate(rows.count, rows.sum, rows.excluded, rows.terms)
    windows = zip(rows.key.tolist(), rows.window_start.tolist(), strict=True)
    got = {(str(k), int(s)): i for i, (k, s) in enumerate(windows)}
    assert set(got) == {(K, 700), (K, 1100), (OTHER, 1100), (K, 2200)}

    dropped = got[(K, 1100)]
    assert est.sampled[dropped] == 0 and not est.exact[dropped]
    assert est.keep_probability[dropped] == 0.5 and np.isinf(est.relative_error[dropped])
    assert est.estimated_count[dropped] == 1 and np.isnan(est.estimated_sum[dropped])  # what was seen

    sampled = got[(OTHER, 1100)]
    assert not est.exact[sampled] and est.sampled[sampled] == 1 and est.estimated_count[sampled] == 2
    assert est.estimated_sum[sampled] == 6.0
    for start in (700, 2200):
        i = got[(K, start)]
        assert est.exact[i] and est.keep_probability[i] == 1.0 and est.relative_error[i] == 0.0
