"""Whether the routers' consumer group has settled: every router a member, every one owning input.

Why wait for it: a rebalance while events are measured makes the routers commit, re-read their
committed epochs and owe markers again, and the latency would then measure the rebalance. So the
benchmark measures only once the group is stable with one member per router, and reports whether
the membership was the same at the end.
"""

from __future__ import annotations

from confluent_kafka import ConsumerGroupState
from confluent_kafka.admin import AdminClient

from ballast.waiting import wait_until


def members(admin: AdminClient, group: str) -> dict[str, int] | None:
    """member id -> input partitions it owns, when the group is stable (None otherwise)."""
    try:
        found = admin.describe_consumer_groups([group])[group].result(timeout=10)
    except Exception:  # the coordinator is loading or moving: ask again
        return None
    if found.state != ConsumerGroupState.STABLE:
        return None
    return {m.member_id: len(m.assignment.topic_partitions) for m in found.members}


def wait_settled(admin: AdminClient, group: str, routers: int, timeout: float) -> dict[str, int]:
    """Until ``group`` is stable with ``routers`` members, each owning at least one partition."""
    last: list[dict[str, int] | None] = [None]

    def settled() -> dict[str, int] | None:
        last[0] = members(admin, group)
        ok = last[0] is not None and len(last[0]) == routers and all(last[0].values())
        return last[0] if ok else None

    return wait_until(
        settled, timeout, f"group {group} stable with {routers} members", 0.5, lambda: str(last[0])
    )
