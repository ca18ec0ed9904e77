"""The Spark adapter's state layout: values cut in pieces no larger than one safe state call.

Why: Spark 4.0.0's state server can read a large state call half-filled (SPARK-53870), so the
adapter never sent one; Spark 4.2.0 reads whole calls, but every checkpoint written so far stores
its values in pieces, so the layout stays. These tests hold the adapter to it, and to reading back
exactly what it wrote, without Spark (a dict stands in for the map state).
"""

from __future__ import annotations

import numpy as np
import pytest

from spark_jobs.reduce.stateful import PiecedMap, _SparkStore
from spark_jobs.reduce.store import HeldRecords


class FakeMapState:
    """The part of Spark's ``MapState`` the adapter uses, in a dict; records the largest value."""

    def __init__(self) -> None:
        self.data: dict[tuple, tuple] = {}
        self.largest = 0

    def getValue(self, key: tuple) -> tuple | None:
        return self.data.get(tuple(key))

    def updateValue(self, key: tuple, value: tuple) -> None:
        self.largest = max(self.largest, len(value[0]))
        self.data[tuple(key)] = tuple(value)

    def removeKey(self, key: tuple) -> None:
        self.data.pop(tuple(key), None)

    def containsKey(self, key: tuple) -> bool:
        return tuple(key) in self.data

    def iterator(self):
        return iter(list(self.data.items()))

    def exists(self) -> bool:
        return bool(self.data)

    def clear(self) -> None:
        self.data.clear()


@pytest.mark.parametrize("size", [0, 1, 99, 100, 101, 350, 1_000])
def test_values_round_trip_in_pieces_no_larger_than_the_limit(size: int) -> None:
    state = FakeMapState()
    blob = bytes(np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8))
    PiecedMap(state, piece_bytes=100).put((7,), blob)
    assert PiecedMap(state, piece_bytes=100).get((7,)) == blob
    assert state.largest <= 100
    assert len(state.data) == max(1, -(-size // 100))


def test_a_shorter_value_leaves_no_piece_of_the_longer_one_behind() -> None:
    state = FakeMapState()
    PiecedMap(state, piece_bytes=10).put((1,), b"x" * 95)  # 10 pieces
    PiecedMap(state, piece_bytes=10).put((1,), b"y" * 25)  # a later step, count not known to it
    assert sorted(state.data) == [(1, 0), (1, 1), (1, 2)]
    assert PiecedMap(state, piece_bytes=10).get((1,)) == b"y" * 25
    known = PiecedMap(state, piece_bytes=10)
    assert known.get((1,)) == b"y" * 25
    known.put((1,), b"z")  # the count read in this step is used
    assert sorted(state.data) == [(1, 0)]


def test_remove_leaves_other_keys() -> None:
    state = FakeMapState()
    m = PiecedMap(state, piece_bytes=4)
    m.put((0, 1, ""), b"0123456789")
    m.put((2, 0, "b"), b"xy")
    PiecedMap(state, piece_bytes=4).remove((0, 1, ""))
    assert sorted(state.data) == [(2, 0, "b", 0)]
    assert PiecedMap(state, piece_bytes=4).get((0, 1, "")) is None
    assert PiecedMap(state, piece_bytes=4).get((2, 0, "b")) == b"xy"


def test_the_store_keeps_buckets_held_blocks_and_chunk_pieces_in_one_map() -> None:
    state = FakeMapState()

    def store() -> _SparkStore:  # a new one per step, as the adapter builds it
        return _SparkStore(PiecedMap(state, piece_bytes=64))

    big = bytes(range(256)) * 3
    store().put_bucket(1795503900000, big)
    store().put_piece("0\x002\x001\x00key", b"piece")
    assert store().get_bucket(1795503900000) == big
    assert store().get_bucket(1795503910000) is None
    assert store().get_piece("0\x002\x001\x00key") == b"piece"
    assert store().held().seq.tolist() == []
    keys = np.array(["k1", "k2", "k1"], dtype=object)
    run, seq, times = np.array([2, 2, 2]), np.array([10, 11, 12]), np.array([5, 6, 7])
    first = HeldRecords(keys, run, seq, times, np.array([1.0, 2.0, 3.0]))
    second = HeldRecords(keys[:1], np.array([2]), np.array([20]), np.array([8]), np.array([4.0]))
    store().append_held(second)
    store().append_held(first)
    held = store().held()
    assert held.seq.tolist() == [10, 11, 12, 20]  # input order, whatever the order of the blocks
    assert held.key.tolist() == ["k1", "k2", "k1", "k1"]
    assert held.value.tolist() == [1.0, 2.0, 3.0, 4.0]
    store().replace_held(held.take(np.array([1])))
    assert store().held().seq.tolist() == [11]
    store().replace_held(HeldRecords.empty())
    assert store().held().seq.tolist() == []
    store().remove_bucket(1795503900000)
    store().remove_piece("0\x002\x001\x00key")
    assert state.data == {}  # nothing left behind
    assert state.largest <= 64
