"""KeyRecords (dtypes, concat, the byte codec buffered records travel in) and the Processor contract."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_jobs.processors.interface import KeyRecords, NotMergeableError, Processor

pytestmark = pytest.mark.unit

record_pairs = st.lists(
    st.tuples(st.integers(-(2**63), 2**63 - 1), st.floats(allow_nan=True, allow_infinity=True)),
    max_size=50,
)


def from_pairs(pairs) -> KeyRecords:
    return KeyRecords(
        np.array([t for t, _ in pairs], dtype=np.int64), np.array([v for _, v in pairs], dtype=np.float64)
    )


@settings(max_examples=200, deadline=None)
@given(record_pairs)
def test_codec_round_trip_is_bit_exact(pairs):
    records = from_pairs(pairs)
    data = records.encode()
    back = KeyRecords.decode(data)
    assert len(data) == 9 + 16 * len(records)
    assert back.event_time.tobytes() == records.event_time.tobytes()
    assert back.value.tobytes() == records.value.tobytes()  # NaN payloads and -0.0 included
    assert back == records
    assert back.encode() == data


def test_decode_refuses_damaged_bytes():
    data = from_pairs([(1, 1.0), (2, 2.0)]).encode()
    for bad in (data[:-1], data + b"\0", data[:5], b"\x07" + data[1:]):
        with pytest.raises(ValueError):
            KeyRecords.decode(bad)


@settings(max_examples=100, deadline=None)
@given(st.lists(record_pairs, max_size=5))
def test_concat_keeps_input_order(parts):
    joined = KeyRecords.concat(from_pairs(p) for p in parts)
    assert joined == from_pairs([pair for p in parts for pair in p])
    assert len(joined) == sum(len(p) for p in parts)


def test_inputs_are_converted_once():
    records = KeyRecords([3, 1, 2], [1, 2, 3])
    assert records.event_time.dtype == np.int64 and records.value.dtype == np.float64
    assert len(KeyRecords([], [])) == 0


@pytest.mark.parametrize(
    ("times", "values", "error"),
    [
        ([1, 2], [1.0], ValueError),
        ([[1]], [[1.0]], ValueError),
        ([1.5], [1.0], TypeError),  # a float time would be truncated silently otherwise
    ],
)
def test_bad_records_are_refused(times, values, error):
    with pytest.raises(error):
        KeyRecords(np.array(times), np.array(values))


class _Counter(Processor[int]):
    """The smallest processor: how many records a key has seen (no windows)."""

    name = "counter"
    mergeable = False

    def init(self):
        return 0

    def process(self, key, records, state):
        return state + len(records)

    def emit(self, key, state, watermark_ms):
        return [], state

    def next_due(self, state):
        return None

    def is_empty(self, state):
        return state == 0

    def encode(self, state):
        return state.to_bytes(8, "little")

    def decode(self, data):
        return int.from_bytes(data, "little")


def test_merge_of_a_non_mergeable_processor_says_why():
    with pytest.raises(NotMergeableError, match=r"'counter' is not mergeable.*buffer"):
        _Counter().merge(1, 2)


def test_a_processor_claiming_mergeable_must_define_merge():
    with pytest.raises(TypeError, match="mergeable but does not define merge"):

        class _Liar(_Counter):
            mergeable = True
