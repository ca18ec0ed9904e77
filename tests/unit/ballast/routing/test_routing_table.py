"""Routing table contract used by the router: F(k) = A[k] if k in A else h(k); A never holds h(k)."""

import pytest

from ballast.routing.murmur2 import kafka_partition
from ballast.routing.table import InvalidKeyError, RoutingTable, check_key

pytestmark = pytest.mark.unit


def test_entries_equal_to_hash_are_dropped():
    n = 5
    h = kafka_partition(b"alpha", n)
    table = RoutingTable(n, {b"alpha": h, b"beta": (kafka_partition(b"beta", n) + 1) % n})
    assert b"alpha" not in table
    assert len(table) == 1
    assert table.route(b"alpha") == h


def test_route_uses_table_then_hash():
    n = 8
    other = (kafka_partition(b"hot", n) + 3) % n
    table = RoutingTable(n, {b"hot": other})
    assert table.route(b"hot") == other
    assert table.route(b"cold") == kafka_partition(b"cold", n)


def test_out_of_range_worker_rejected():
    with pytest.raises(ValueError):
        RoutingTable(3, {b"k": 3})


def test_with_changes_back_to_hash_deletes_entry_and_bumps_epoch():
    n = 4
    key = b"k1"
    h = kafka_partition(key, n)
    t1 = RoutingTable(n, {key: (h + 1) % n}, epoch=7)
    t2 = t1.with_changes({key: h})
    assert key in t1 and key not in t2
    assert t2.epoch == 8


def test_check_key_is_the_one_key_validation():
    assert check_key(b"k") == b"k"
    with pytest.raises(InvalidKeyError) as empty:
        check_key(b"")
    assert empty.value.reason == "missing-key"
    with pytest.raises(InvalidKeyError) as bad:
        check_key(b"\xff\xfe")
    assert bad.value.reason == "malformed"
