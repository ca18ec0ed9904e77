"""WindowAggregate: merge equals whole, batching does not matter, emit closes windows, codec, reference."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from processor_cases import (
    FAR_FUTURE,
    as_records,
    as_reference_rows,
    batches,
    cuts,
    fold,
    keyed_events,
    records_lists,
    run_per_key,
    window_specs,
)

from spark_jobs.processors.aggregate import WindowAggregate
from spark_jobs.processors.interface import KeyRecords
from spark_jobs.processors.last_values import LastValues
from spark_jobs.processors.window_stats import WindowStats
from spark_jobs.processors.windows import WindowSpec
from tests.support.reduce_reference import expected_aggregates

pytestmark = pytest.mark.unit


@settings(max_examples=300, deadline=None)
@given(window_specs(), records_lists, st.data())
def test_merge_of_a_split_equals_the_whole(spec, pairs, data):
    """A key moved after record ``cut``: old worker folds the head, new worker the rest, then merge."""
    agg = WindowAggregate(spec)
    cut = data.draw(st.integers(0, len(pairs)), label="cut")
    head, rest = pairs[:cut], pairs[cut:]
    # each side itself arrives in micro-batches, as on a worker
    earlier = fold(agg, "k", batches(head, data.draw(cuts(len(head)), label="head batches")))
    later = fold(agg, "k", batches(rest, data.draw(cuts(len(rest)), label="rest batches")))
    whole = agg.process("k", as_records(pairs), agg.init())
    merged = agg.merge(earlier, later)
    assert merged == whole
    assert agg.emit("k", merged, FAR_FUTURE)[0] == agg.emit("k", whole, FAR_FUTURE)[0]


@settings(max_examples=300, deadline=None)
@given(window_specs(), records_lists, st.data())
def test_micro_batches_equal_one_batch(spec, pairs, data):
    agg = WindowAggregate(spec)
    split = fold(agg, "k", batches(pairs, data.draw(cuts(len(pairs), max_cuts=10))))
    assert split == agg.process("k", as_records(pairs), agg.init())


@settings(max_examples=200, deadline=None)
@given(window_specs(), records_lists, st.integers(-400, 400))
def test_emit_returns_exactly_the_closed_windows_and_keeps_the_rest(spec, pairs, watermark):
    agg = WindowAggregate(spec)
    state = agg.process("k", as_records(pairs), agg.init())
    results, rest = agg.emit("k", state, watermark)
    every = agg.emit("k", state, FAR_FUTURE)[0]
    assert results == [r for r in every if r.window_end <= watermark]  # in window order
    assert all(int(s) + spec.size_ms > watermark for s in rest.starts)
    assert results + agg.emit("k", rest, FAR_FUTURE)[0] == every  # nothing lost, nothing twice
    assert agg.emit("k", rest, watermark) == ([], rest)  # emitting again finds nothing


def test_a_window_closes_when_the_watermark_reaches_its_end():
    agg = WindowAggregate(WindowSpec(10))
    state = agg.process("k", KeyRecords([5, 15], [1.0, 2.0]), agg.init())
    results, state = agg.emit("k", state, 9)
    assert results == []
    results, state = agg.emit("k", state, 10)
    assert [(r.window_start, r.window_end, r.count) for r in results] == [(0, 10, 1)]
    assert agg.next_due(state) == 20


@settings(max_examples=100, deadline=None)
@given(window_specs(), records_lists)
def test_next_due_is_the_smallest_window_end_held(spec, pairs):
    agg = WindowAggregate(spec)
    state = agg.process("k", as_records(pairs), agg.init())
    ends = [r.window_end for r in agg.emit("k", state, FAR_FUTURE)[0]]
    assert agg.next_due(state) == (min(ends) if ends else None)
    assert agg.is_empty(state) == (not pairs)
    if ends:
        # emitting at next_due releases that window and nothing due later
        results, _ = agg.emit("k", state, agg.next_due(state))
        assert [r.window_end for r in results] == [min(ends)]


@settings(max_examples=200, deadline=None)
@given(window_specs(), records_lists)
def test_codec_round_trip(spec, pairs):
    agg = WindowAggregate(spec)
    state = agg.process("k", as_records(pairs), agg.init())
    data = agg.encode(state)
    back = agg.decode(data)
    assert back == state
    assert agg.encode(back) == data
    assert len(data) == 3 + 16 + 8 + 40 * len(state)


def test_decode_refuses_other_windows_other_processors_and_damage():
    agg = WindowAggregate(WindowSpec(10))
    data = agg.encode(agg.process("k", KeyRecords([1, 12], [1.0, 2.0]), agg.init()))
    with pytest.raises(ValueError, match="written for windows"):
        WindowAggregate(WindowSpec(10, 5)).decode(data)
    with pytest.raises(ValueError, match="not a last_values state"):
        LastValues(3, WindowSpec(10)).decode(data)
    for bad in (data[:-1], data + b"\0", data[:2], data[:10]):
        with pytest.raises(ValueError):
            agg.decode(bad)


def test_states_are_values_process_and_emit_leave_their_input_alone():
    agg = WindowAggregate(WindowSpec(10, 5))
    state = agg.process("k", KeyRecords([1, 7, 12], [1.0, 2.0, 3.0]), agg.init())
    before = agg.encode(state)
    agg.process("k", KeyRecords([3, 8], [10.0, -4.0]), state)
    agg.emit("k", state, 100)
    agg.merge(state, state)
    assert agg.encode(state) == before


@settings(max_examples=200, deadline=None)
@given(window_specs(), keyed_events(), st.integers(1, 7))
def test_results_equal_the_independent_reference(spec, events, batch_size):
    got = run_per_key(WindowAggregate(spec), events, batch_size)
    assert as_reference_rows(got) == expected_aggregates(events, spec.size_ms, spec.slide_ms)


@settings(max_examples=100, deadline=None)
@given(
    window_specs(),
    st.lists(st.tuples(st.integers(-300, 300), st.floats(-1e6, 1e6)), max_size=60),
    st.data(),
)
def test_general_floats_differ_from_the_reference_by_rounding_only(spec, pairs, data):
    """Without dyadic values a merged sum may differ in the last bits; count, min and max may not."""
    agg = WindowAggregate(spec)
    cut = data.draw(st.integers(0, len(pairs)))
    merged = agg.merge(
        agg.process("k", as_records(pairs[:cut]), agg.init()),
        agg.process("k", as_records(pairs[cut:]), agg.init()),
    )
    events = [{"key": "k", "event_time": t, "value": v} for t, v in pairs]
    expected = expected_aggregates(events, spec.size_ms, spec.slide_ms)
    results = agg.emit("k", merged, FAR_FUTURE)[0]
    assert sorted(expected) == [("k", r.window_start) for r in results]
    for r in results:
        row = expected[("k", r.window_start)]
        assert (r.count, r.min, r.max) == (row["count"], row["min"], row["max"])
        assert math.isclose(r.sum, row["sum"], rel_tol=1e-12, abs_tol=1e-6)


def test_sum_is_exact_for_dyadic_values_in_any_split():
    # 0.1 is not dyadic: (0.1 + 0.2) + 0.3 != 0.1 + (0.2 + 0.3) in floats; quarters always agree
    assert (0.1 + 0.2) + 0.3 != 0.1 + (0.2 + 0.3)
    agg = WindowAggregate(WindowSpec(10))
    values = [0.25, 0.5, 0.75]
    merged = agg.merge(
        agg.process("k", KeyRecords([1], values[:1]), agg.init()),
        agg.process("k", KeyRecords([2, 3], values[1:]), agg.init()),
    )
    assert agg.emit("k", merged, 10)[0][0].sum == 1.5


def test_empty_batches_and_empty_states():
    agg = WindowAggregate(WindowSpec(10))
    empty = agg.init()
    assert agg.is_empty(empty) and agg.next_due(empty) is None
    assert agg.process("k", KeyRecords.empty(), empty) is empty
    assert agg.merge(empty, empty) == WindowStats.empty()
    assert agg.emit("k", empty, FAR_FUTURE) == ([], empty)
    assert agg.decode(agg.encode(empty)) == empty


def test_results_are_python_numbers():
    agg = WindowAggregate(WindowSpec(10))
    (r,) = agg.emit("k", agg.process("k", KeyRecords(np.array([3]), np.array([2.0])), agg.init()), 10)[0]
    assert type(r.window_start) is int and type(r.count) is int and type(r.sum) is float
    assert (r.key, r.mean, r.values) == ("k", 2.0, ())
