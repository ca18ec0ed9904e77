"""RouteCache is F(k) of the epoch's RoutingTable, memoised; bad keys are refused, never cached."""

from __future__ import annotations

import pytest

from ballast.routing.murmur2 import kafka_partition
from ballast.routing.table import InvalidKeyError, RoutingTable
from services.router.routes import RouteCache

pytestmark = pytest.mark.unit

KEYS = [f"key-{i:07d}".encode() for i in range(2_000)] + ["ключ-ü".encode(), b"x" * 300]


def _table() -> RoutingTable:
    pinned = {k: (kafka_partition(k, 8) + 1) % 8 for k in KEYS[:50]}
    return RoutingTable(8, pinned, epoch=3)


def test_cache_agrees_with_the_table_on_misses_and_hits():
    table = _table()
    cache = RouteCache(table, capacity=10_000)
    first = [cache.route(k) for k in KEYS]
    again = [cache.get(k) for k in KEYS]  # every key is cached now: the loop's lookup hits
    assert first == again == [table.route(k) for k in KEYS]
    assert any(cache.get(k) != kafka_partition(k, 8) for k in KEYS[:50])  # the pins are honoured


def test_small_capacity_clears_and_stays_correct():
    table = _table()
    cache = RouteCache(table, capacity=7)
    lookup = cache.get  # bound once, as the loop does: clearing must not replace the dict
    for k in KEYS:
        assert cache.route(k) == table.route(k)
        assert len(cache.routes) <= 7
        assert lookup(k) == table.route(k)


@pytest.mark.parametrize(
    "key,reason",
    [(b"", "missing-key"), (b"\xff\xfe", "malformed"), ("é".encode("latin-1"), "malformed")],
)
def test_unroutable_keys_raise_the_dead_letter_reason_and_are_not_cached(key, reason):
    cache = RouteCache(_table(), capacity=100)
    with pytest.raises(InvalidKeyError) as info:
        cache.miss(key)
    assert info.value.reason == reason
    assert cache.get(key) is None and not cache.routes
