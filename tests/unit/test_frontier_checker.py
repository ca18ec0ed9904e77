"""The routed-topic checker (tests/support/frontier.py) must be able to fail: each rule on a small
hand-made topic, plus a round trip through the router's hand-rolled marker encoding."""

from __future__ import annotations

import pytest

from ballast.avro import wire
from tests.support.frontier import Data, Marker, RoutedTopic, decode, source_counts, violations

pytestmark = pytest.mark.unit

P0, P1 = ("in", 0), ("in", 1)
INPUTS = {P0, P1}


def topic(*items: Marker | Data, w: int = 0) -> RoutedTopic:
    t = RoutedTopic()
    t.partitions[w] = list(items)
    return t


def m(off: int, epoch: int, *covers: tuple[str, int]) -> Marker:
    return Marker(off, epoch, frozenset(covers), "r")


def d(off: int, epoch: int, src: tuple[str, int] = P0, src_off: int = 0) -> Data:
    return Data(off, epoch, src, src_off, "k")


def kinds(found: list[str]) -> set[str]:
    return {line.split(":")[0] for line in found}


def test_a_well_formed_topic_passes():
    t = topic(
        m(0, 0, P0, P1), d(1, 0), d(2, 0, P1), m(3, 2, P0), d(4, 2), d(5, 0, P1), m(6, 2, P1), d(7, 2, P1)
    )
    assert violations(t, INPUTS) == []


def test_record_before_any_covering_marker():
    assert kinds(violations(topic(m(0, 0, P1), d(1, 0, P0)), INPUTS)) == {"unannounced"}


def test_record_epoch_above_its_marker():
    assert kinds(violations(topic(m(0, 0, P0), d(1, 1)), INPUTS)) == {"unannounced"}


def test_record_epoch_below_its_marker_breaks_the_frontier():
    assert kinds(violations(topic(m(0, 3, P0), d(1, 2)), INPUTS)) == {"frontier"}


def test_epochs_going_back_for_one_source():
    found = violations(topic(m(0, 3, P0), d(1, 3), m(2, 1, P0), d(3, 1)), INPUTS)
    assert kinds(found) == {"marker-backwards", "frontier", "backwards"}


def test_markers_of_other_sources_do_not_count():
    # p1's marker at 5 says nothing about p0: p0's record at epoch 0 stays under p0's marker 0
    assert violations(topic(m(0, 0, P0, P1), m(1, 5, P1), d(2, 0, P0)), INPUTS) == []
    assert kinds(violations(topic(m(0, 0, P0), m(1, 1, ("other", 9)), d(2, 0)), INPUTS)) == {
        "unknown-partition"
    }


def test_each_kind_is_capped():
    t = topic(*(d(i, 0) for i in range(30)))
    found = violations(t, INPUTS, limit=5)
    assert len(found) == 6 and found[-1] == "unannounced: 25 more"


def test_the_router_marker_encoding_decodes_with_the_schema_file():
    value = wire.epoch_marker(7, "r1", 3, 1234, wire.covers_field([("in", 1), ("in", 0)]))
    kind, body = decode(value)
    assert kind == "marker"
    assert body["epoch"] == 7 and body["worker"] == 3
    assert round(body["marker_time"].timestamp() * 1000) == 1234
    assert body["covers"] == [
        {"topic": "in", "partition": 0, "event_time": None},
        {"topic": "in", "partition": 1, "event_time": None},
    ]
    assert decode(wire.epoch_marker(1, "r", 0, 0))[1]["covers"] == []


def test_source_counts_find_duplicates():
    t = topic(m(0, 0, P0), d(1, 0, P0, 5), d(2, 0, P0, 5), d(3, 0, P0, 6))
    assert source_counts(t) == {("in", 0, 5): 2, ("in", 0, 6): 1}
