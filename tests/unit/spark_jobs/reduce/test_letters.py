"""A worker's dead letters get their records read back (spark_jobs/reduce/letters.py), without a
broker: which offsets are asked for, in which runs, and what a letter says when its record cannot
be read."""

from __future__ import annotations

from collections.abc import Sequence

from spark_jobs.reduce.contract import DeadLetter
from spark_jobs.reduce.letters import runs, with_records


class Topic:
    """One routed partition's records as a dict; remembers what was asked."""

    def __init__(self, records: dict[int, bytes], fail: Exception | None = None) -> None:
        self.records, self.fail, self.asked = records, fail, []

    def read(self, partition: int, offsets: Sequence[int]) -> dict[int, bytes]:
        self.asked.append((partition, sorted(offsets)))
        if self.fail is not None:
            raise self.fail
        return {o: self.records[o] for o in offsets if o in self.records}


def test_offsets_close_together_are_read_in_one_run():
    assert runs([]) == []
    assert runs([7, 3, 3, 5], gap=10) == [(3, 7)]
    assert runs([0, 10, 21, 100, 101], gap=10) == [(0, 10), (21, 21), (100, 101)]


def test_a_letter_without_its_record_gets_it_and_the_others_are_left_as_they_are():
    dead = [
        DeadLetter(4, None, "late", "d"),
        DeadLetter(9, b"junk", "malformed", "e"),  # an undecodable row carries its bytes already
        DeadLetter(12, None, "misrouted", "f"),
    ]
    topic = Topic({4: b"four", 9: b"nine", 12: b"twelve"})
    got = with_records(dead, topic, partition=3)
    assert topic.asked == [(3, [4, 12])]
    assert [(d.offset, d.raw, d.reason, d.detail) for d in got] == [
        (4, b"four", "late", "d"), (9, b"junk", "malformed", "e"), (12, b"twelve", "misrouted", "f"),
    ]  # fmt: skip


def test_nothing_is_read_without_a_letter_that_needs_it():
    topic = Topic({})
    assert with_records([], topic, 0) == []
    kept = [DeadLetter(1, b"x", "malformed", "")]
    assert with_records(kept, topic, 0) == kept and topic.asked == []


def test_a_record_that_cannot_be_read_back_leaves_a_letter_saying_why():
    dead = [DeadLetter(4, None, "late", "older than the watermark"), DeadLetter(5, None, "late", "x")]
    missing = with_records(dead, Topic({5: b"five"}), 0)
    assert [(d.raw, d.detail) for d in missing] == [
        (None, "older than the watermark (the record could not be read back: not found at its offset)"),
        (b"five", "x"),
    ]
    broken = with_records(dead, Topic({}, fail=TimeoutError("no broker")), 0)
    assert [d.raw for d in broken] == [None, None]
    assert all(
        d.detail.endswith("(the record could not be read back: TimeoutError: no broker)") for d in broken
    )


def test_a_record_whose_value_is_null_is_read_back_as_null_without_a_complaint():
    got = with_records([DeadLetter(4, None, "malformed", "a tombstone")], Topic({4: None}), 0)
    assert [(d.raw, d.detail) for d in got] == [(None, "a tombstone")]
