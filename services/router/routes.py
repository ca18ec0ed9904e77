"""The router's per-epoch route cache: ``F(k)`` memoised, never re-implemented.

Why a cache at all: :meth:`RoutingTable.route` costs a dict lookup plus, for a key that is not
pinned, one murmur2 in Python (microseconds); a Zipf workload repeats its keys, so one dict lookup
per record in the loop (``cache.get``) is what keeps the router near a bare consume→produce loop.
Why per epoch: a new table (or worker count) changes ``F``, so the router builds a new cache when it
applies an epoch instead of invalidating entries. Why the key check here: a key is validated
(:func:`check_key`) exactly once, when it first misses the cache, not once per record.
"""

from __future__ import annotations

from ballast.routing.table import RoutingTable, check_key


class RouteCache:
    """``key -> worker`` for one epoch's table; bounded (cleared when ``capacity`` keys are cached)."""

    __slots__ = ("capacity", "get", "routes", "table")

    def __init__(self, table: RoutingTable, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        self.table = table
        self.capacity = capacity
        self.routes: dict[bytes, int] = {}
        # the loop's lookup, bound once: the dict is cleared in place, never replaced
        self.get = self.routes.get

    def miss(self, key: bytes) -> int:
        """Route a key the cache has not seen; raises :class:`~ballast.routing.table.InvalidKeyError`
        (the dead-letter reason) for an empty or non-UTF-8 key, which is never cached."""
        worker = self.table.route(check_key(key))
        routes = self.routes
        if len(routes) >= self.capacity:
            routes.clear()
        routes[key] = worker
        return worker

    def route(self, key: bytes) -> int:
        """``F(key)`` through the cache (the loop inlines ``get`` then ``miss``)."""
        worker = self.get(key)
        return self.miss(key) if worker is None else worker
