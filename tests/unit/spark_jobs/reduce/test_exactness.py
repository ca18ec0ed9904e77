"""When a row may say ``exact``: from what routers actually shed, carried with the state when a key
moves, never from clocks (docs/results.md, "When a row may say exact").

The cases are those of the defects found by review: a router 60 s behind its input at a shed's
onset and at its lift (records of windows that closed long before were dropped), and a per-key
or windowed state that moved after records of it were shed. Each truth is stated by the test:
which records of a window were offered and which of them the router dropped."""

from __future__ import annotations

import numpy as np
import pytest

from ballast.control.state import make_event
from ballast.routing.murmur2 import kafka_partition
from spark_jobs.processors.aggregate import WindowAggregate
from spark_jobs.processors.batch import PerKeyAdapter
from spark_jobs.processors.last_values import LastValues
from spark_jobs.processors.sampling import estimate
from spark_jobs.processors.windows import WindowSpec
from spark_jobs.reduce.ownership import OwnershipView
from tests.support.engine_rows import N, Worker, chunk_row, data, genesis, marker, shedding

pytestmark = pytest.mark.unit

IN = ("in:0",)
K = next(f"k{i}" for i in range(1000) if kafka_partition(f"k{i}".encode(), N) == 0)
OTHER = next(f"o{i}" for i in range(1000) if kafka_partition(f"o{i}".encode(), N) == 0)


def log(*events) -> OwnershipView:
    view = OwnershipView(N)
    view.apply(genesis())
    for e in events:
        view.apply(e)
    return view


def move(epoch: int, pins: dict[str, int]):
    return make_event(epoch, "ROUTING_UPDATE", {"assign": pins, "unassign": [], "reason": ""})


def rows_of(results) -> dict[tuple[str, int], dict]:
    """Every row by (key, window start), with its estimates; a window written twice keeps both."""
    est = estimate(results.count, results.sum, results.excluded, results.terms)
    out: dict[tuple[str, int], dict] = {}
    for i in range(len(results)):
        out.setdefault((str(results.key[i]), int(results.window_start[i])), []).append(
            {
                "count": int(results.count[i]),
                "revision": int(results.revision[i]),
                "exact": bool(est.exact[i]),
                "keep": float(est.keep_probability[i]),
                "rel": float(est.relative_error[i]),
            }
        )
    return out


# --- defect 3: a router that lags its input at a shed's onset and at its lift ----------------------


def test_a_window_routed_60_s_late_into_a_shed_is_not_exact() -> None:
    """Window [40 s, 50 s) of K had 4 records. The router lags its input by 58 s: it routed two of
    them before the shed (p = 1) and dropped the other two after it (p = 1/2), saying so in its
    next marker. The row holds 2 and must not claim exact. Failed before: the old rule judged from
    the shed's log time (100 s) and the window's own times (40-50 s), 50 s apart, and said exact."""
    view = log(shedding(1, "*", 0.5))  # appended at 100 s by the controller's clock (the old rule read it)
    w = Worker(0, view, WindowAggregate(WindowSpec(10_000)), partitions=IN)
    w.step(
        [
            marker(0, 0, "in:0"),
            data(K, 1.0, 41_000, 0),
            data(K, 1.0, 42_000, 0),
            marker(1, 0, "in:0", shed=[("in", 43_000, 44_999, 0.5)]),  # K's other two, dropped
        ]
    )
    got = rows_of(w.step([], watermark=60_000).results)
    row = got[(K, 40_000)][-1]
    assert row["count"] == 2 and not row["exact"] and row["keep"] == 0.5 and np.isinf(row["rel"])


def test_a_window_routed_60_s_late_after_the_lift_is_not_exact_and_one_nothing_was_shed_from_is() -> None:
    """At the lift the lagging router is still shedding records whose windows closed long ago:
    they are reported, and those windows are not exact. A window of the same time whose records
    were all routed under p = 1 (the other router, at the lift's epoch) and overlaps no shed span
    is exact, though the log's end says nothing of when each router applied what."""
    view = log(shedding(1, "*", 0.5), shedding(2, "*", 1.0))
    w = Worker(0, view, WindowAggregate(WindowSpec(10_000)), partitions=("in:0", "in:1"))
    w.step(
        [
            marker(2, 0, "in:1"),
            data(OTHER, 1.0, 61_000, 2),  # in:1's router, after the lift
            marker(1, 0, "in:0"),
            data(K, 1.0, 45_000, 1),  # kept under p = 1/2: sampled
            marker(2, 0, "in:0", shed=[("in", 46_000, 46_999, 0.5)]),  # dropped before it switched
            data(K, 2.0, 47_000, 2),
        ]
    )
    got = rows_of(w.step([], watermark=100_000).results)
    sampled = got[(K, 40_000)][-1]
    assert not sampled["exact"] and sampled["count"] == 2  # one sampled record: estimates
    clean = got[(OTHER, 60_000)][-1]
    assert clean["exact"] and clean["count"] == 1


def test_a_shed_reported_after_the_window_was_written_corrects_it() -> None:
    """A router stalled past the window: its records of the window arrive late, and the ones it
    shed are reported after the row was written exact. The row is written again (a correction)
    and no longer claims exact; a window the report does not overlap is left alone."""
    view = log(shedding(1, "*", 0.5))
    w = Worker(0, view, WindowAggregate(WindowSpec(10_000)), partitions=IN, horizon_ms=30_000)
    w.step([marker(0, 0, "in:0"), data(K, 1.0, 41_000, 0), data(OTHER, 1.0, 61_000, 0)])
    first = rows_of(w.step([], watermark=75_000).results)
    assert first[(K, 40_000)][-1]["exact"] and first[(OTHER, 60_000)][-1]["exact"]
    report = marker(1, 0, "in:0", shed=[("in", 44_000, 44_999, 0.5)])
    later = rows_of(w.step([report], watermark=None).results)
    correction = {"count": 1, "revision": 1, "exact": False, "keep": 0.5, "rel": float("inf")}
    assert later == {(K, 40_000): [correction]}  # the window at 60 s is not written again


def test_spans_of_other_topics_and_spans_past_every_window_change_nothing() -> None:
    view = log(shedding(1, "*", 0.5))
    w = Worker(0, view, WindowAggregate(WindowSpec(10_000)), partitions=IN)
    w.step([marker(1, 0, "in:0", shed=[("elsewhere", 40_000, 49_999, 0.5)]), data(K, 1.0, 41_000, 0)])
    assert rows_of(w.step([], watermark=60_000).results)[(K, 40_000)][-1]["exact"]
    w.step([marker(1, 0, "in:0", shed=[("in", 1_000, 1_999, 0.5)])], watermark=None)  # windows long gone
    assert w.meta.shed == []


# --- defect 4: what a state was built from travels with it ---------------------------------------


def per_key():
    return PerKeyAdapter(WindowAggregate(WindowSpec(10_000)), bins=4)


def last_values():
    return LastValues(3, WindowSpec(10_000))


@pytest.mark.parametrize("processor", [per_key, last_values], ids=["user", "last-values"])
@pytest.mark.parametrize("path", ["A->B", "A->B->A", "SCALE"])
def test_a_state_shed_at_its_old_owner_is_not_exact_at_its_new_one(processor, path: str) -> None:
    """Records of K's window kept under p = 1/2 at worker 0 (the ones dropped reported there),
    the shed lifted, then K moves (a table move, there and back, or a SCALE that rehashes it): the
    worker that writes the window must not claim exact. Failed before for the per-key processor:
    the installed state's run started after the lift, and only that run's epochs were asked."""
    n0 = 4
    if path == "SCALE":
        # a key homed at worker 0 under 4 workers and elsewhere under 3
        key = next(f"s{i}" for i in range(1000) if kafka_partition(f"s{i}".encode(), 4) == 0
                   and kafka_partition(f"s{i}".encode(), 3) != 0)  # fmt: skip
        scale = make_event(3, "SCALE", {"num_workers": 3, "reason": ""})
        events = [shedding(1, "*", 0.5), shedding(2, "*", 1.0), scale]
        dest = kafka_partition(key.encode(), 3)
    else:
        key, dest = K, 1
        events = [shedding(1, "*", 0.5), shedding(2, "*", 1.0), move(3, {key: 1})]
        if path == "A->B->A":
            events.append(move(4, {key: 0}))
    view = log(*events)
    workers = {w: Worker(w, view, processor(), partitions=IN) for w in range(n0)}
    a = workers[0]
    out = a.step(
        [
            marker(1, 0, "in:0"),
            data(key, 1.0, 1_000, 1),
            data(key, 1.0, 1_500, 1),
            marker(2, 0, "in:0", shed=[("in", 2_000, 2_999, 0.5)]),  # three more, dropped
            data(key, 1.0, 3_500, 2),
            marker(3, 0, "in:0"),
        ]
    )
    b = workers[dest]
    b.step([marker(3, dest, "in:0")])
    if path == "SCALE":  # the other old owners announce they shipped nothing
        for w in range(1, n0):
            if w != dest:
                for c in workers[w].step([marker(3, w, "in:0")]).chunks:
                    if c.to_worker == dest:
                        b.step([chunk_row(c)])
    chunks = [c for c in out.chunks if c.to_worker == dest]
    assert chunks, "K's state was not shipped: nothing was tested"
    b.step([chunk_row(c) for c in chunks])
    writer = b
    if path == "A->B->A":
        back = b.step([marker(4, dest, "in:0")]).chunks
        a.step([marker(4, 0, "in:0"), *[chunk_row(c) for c in back if c.to_worker == 0]])
        writer = a
    got = rows_of(writer.step([], watermark=20_000).results)
    row = got[(key, 0)][-1]
    assert row["count"] == 3 and not row["exact"], row
