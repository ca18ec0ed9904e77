"""Window assignment against the definition: [start, start + size) with start a multiple of the slide."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from processor_cases import window_specs

from spark_jobs.processors.windows import WindowSpec

pytestmark = pytest.mark.unit


def brute_force_pairs(event_time: list[int], spec: WindowSpec) -> list[tuple[int, int]]:
    """Every (record, start) by scanning candidate starts one millisecond at a time."""
    slide = spec.slide_ms
    pairs = []
    for i, t in enumerate(event_time):
        for start in range(t - spec.size_ms - slide, t + slide + 1):
            if start % slide == 0 and start <= t < start + spec.size_ms:
                pairs.append((i, start))
    return pairs


@settings(max_examples=300, deadline=None)
@given(window_specs(), st.lists(st.integers(-500, 500), max_size=40))
def test_assign_matches_the_definition(spec, event_time):
    index, starts = spec.assign(np.array(event_time, dtype=np.int64))
    got = list(zip(index.tolist(), starts.tolist(), strict=True))
    # same pairs, and in the promised order: record by record, oldest window first
    assert got == brute_force_pairs(event_time, spec)
    assert index.dtype.kind == "i" and starts.dtype == np.int64


def test_times_before_the_epoch_floor_to_earlier_windows():
    spec = WindowSpec(10)
    _, starts = spec.assign(np.array([-1, -10, -11, 0, 9, 10]))
    assert starts.tolist() == [-10, -10, -20, 0, 0, 10]
    _, starts = WindowSpec(10, 5).assign(np.array([-1]))
    assert starts.tolist() == [-10, -5]


def test_realistic_epoch_milliseconds():
    t = 1_763_800_000_123  # 2025 in ms: past 2**32, where an int32 slip would show
    _, starts = WindowSpec(60_000, 15_000).assign(np.array([t]))
    assert starts.tolist() == [t - t % 15_000 - 45_000 + 15_000 * i for i in range(4)]
    assert WindowSpec(60_000).end(starts[0]) == starts[0] + 60_000


def test_pane_start_is_the_latest_window_start():
    spec = WindowSpec(30, 10)
    t = np.array([-21, -20, -1, 0, 29])
    assert spec.pane_start(t).tolist() == [-30, -20, -10, 0, 20]


def test_empty_input():
    index, starts = WindowSpec(10, 5).assign(np.array([], dtype=np.int64))
    assert index.size == 0 and starts.size == 0
    _, starts = WindowSpec(10).assign(np.array([]))  # numpy's empty array is float64: accepted
    assert starts.dtype == np.int64 and starts.size == 0


def test_tumbling_forms_are_one_spec():
    assert WindowSpec(10) == WindowSpec(10, 10)
    assert WindowSpec(10).tumbling and WindowSpec(10).slide_ms == 10
    assert not WindowSpec(10, 5).tumbling
    assert WindowSpec(10, 5).per_record == 2


@pytest.mark.parametrize(
    ("size", "slide", "error"),
    [
        (0, None, ValueError),
        (-10, None, ValueError),
        (10, 0, ValueError),
        (10, 3, ValueError),  # size not a multiple of the slide
        (10, 20, ValueError),
        (10.0, None, TypeError),
        (True, None, TypeError),
    ],
)
def test_invalid_specs_are_refused(size, slide, error):
    with pytest.raises(error):
        WindowSpec(size, slide)


def test_float_times_are_refused():
    with pytest.raises(TypeError):
        WindowSpec(10).assign(np.array([1.5]))


def test_pack_round_trip():
    spec = WindowSpec(60_000, 5_000)
    data = b"xx" + spec.pack()
    assert WindowSpec.unpack(data, 2) == (spec, 18)
    with pytest.raises(ValueError):
        WindowSpec.unpack(data[:-1], 2)
