"""LastValues: batching does not matter, a move by replay, merge refused, codec, the reference."""

from __future__ import annotations

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
from spark_jobs.processors.interface import KeyRecords, NotMergeableError
from spark_jobs.processors.last_values import LastValues
from spark_jobs.processors.windows import WindowSpec
from tests.support.reduce_reference import expected_last_values

pytestmark = pytest.mark.unit

sizes_n = st.integers(1, 7)


@settings(max_examples=300, deadline=None)
@given(sizes_n, window_specs(), records_lists, st.data())
def test_micro_batches_equal_one_batch(n, spec, pairs, data):
    lv = LastValues(n, spec)
    split = fold(lv, "k", batches(pairs, data.draw(cuts(len(pairs), max_cuts=10))))
    whole = lv.process("k", as_records(pairs), lv.init())
    assert split == whole
    assert lv.emit("k", split, FAR_FUTURE)[0] == lv.emit("k", whole, FAR_FUTURE)[0]


@settings(max_examples=200, deadline=None)
@given(sizes_n, window_specs(), records_lists, st.data())
def test_a_move_by_replay_equals_no_move(n, spec, pairs, data):
    """The engine's path for a non-mergeable key: ship the state, buffer the new records, replay."""
    lv = LastValues(n, spec)
    cut = data.draw(st.integers(0, len(pairs)), label="cut")
    shipped = lv.encode(fold(lv, "k", batches(pairs[:cut], data.draw(cuts(cut)))))
    rest = pairs[cut:]
    buffered = [b.encode() for b in batches(rest, data.draw(cuts(len(rest))))]
    replayed = lv.process("k", KeyRecords.concat(KeyRecords.decode(b) for b in buffered), lv.decode(shipped))
    assert replayed == lv.process("k", as_records(pairs), lv.init())


def test_merge_is_refused():
    lv = LastValues(2, WindowSpec(10))
    state = lv.process("k", KeyRecords([1], [1.0]), lv.init())
    assert not lv.mergeable
    with pytest.raises(NotMergeableError, match="not mergeable"):
        lv.merge(state, state)


@settings(max_examples=300, deadline=None)
@given(sizes_n, window_specs(), keyed_events(), st.integers(1, 7))
def test_results_equal_the_independent_reference(n, spec, events, batch_size):
    got = run_per_key(LastValues(n, spec), events, batch_size)
    expected = expected_last_values(events, n, spec.size_ms, spec.slide_ms)
    assert as_reference_rows(got, with_values=True) == expected


def test_values_are_the_last_n_in_input_order_not_time_order():
    lv = LastValues(3, WindowSpec(100))
    state = lv.process("k", KeyRecords([50, 10, 40], [1.0, 2.0, 3.0]), lv.init())
    state = lv.process("k", KeyRecords([20, 30], [4.0, 5.0]), state)
    (r,) = lv.emit("k", state, 100)[0]
    assert r.values == (3.0, 4.0, 5.0)
    # statistics cover all five records, not only the last three
    assert (r.count, r.sum, r.min, r.max, r.mean) == (5, 15.0, 1.0, 5.0, 3.0)


@settings(max_examples=200, deadline=None)
@given(sizes_n, window_specs(), records_lists, st.integers(-400, 400))
def test_emit_returns_exactly_the_closed_windows_and_keeps_the_rest(n, spec, pairs, watermark):
    lv = LastValues(n, spec)
    state = lv.process("k", as_records(pairs), lv.init())
    every = lv.emit("k", state, FAR_FUTURE)[0]
    results, rest = lv.emit("k", state, watermark)
    assert results == [r for r in every if r.window_end <= watermark]
    assert results + lv.emit("k", rest, FAR_FUTURE)[0] == every
    ends = [r.window_end for r in every if r.window_end > watermark]
    assert lv.next_due(rest) == (min(ends) if ends else None)
    assert lv.is_empty(rest) == (not ends)


@settings(max_examples=200, deadline=None)
@given(sizes_n, window_specs(), records_lists)
def test_codec_round_trip(n, spec, pairs):
    lv = LastValues(n, spec)
    state = lv.process("k", as_records(pairs), lv.init())
    data = lv.encode(state)
    assert lv.decode(data) == state
    assert lv.encode(lv.decode(data)) == data


def test_decode_refuses_other_options_other_processors_and_damage():
    lv = LastValues(2, WindowSpec(10))
    data = lv.encode(lv.process("k", KeyRecords([1, 2, 3, 12], [1.0, 2.0, 3.0, 4.0]), lv.init()))
    with pytest.raises(ValueError, match="n=2, not n=3"):
        LastValues(3, WindowSpec(10)).decode(data)
    with pytest.raises(ValueError, match="written for windows"):
        LastValues(2, WindowSpec(20)).decode(data)
    with pytest.raises(ValueError, match="not an aggregate state"):
        WindowAggregate(WindowSpec(10)).decode(data)
    for bad in (data[:-8], data + b"\0" * 8, data[:5]):
        with pytest.raises(ValueError):
            lv.decode(bad)


@pytest.mark.parametrize("n", [0, -1, 2.5, True])
def test_n_must_be_a_positive_int(n):
    with pytest.raises((ValueError, TypeError)):
        LastValues(n, WindowSpec(10))
