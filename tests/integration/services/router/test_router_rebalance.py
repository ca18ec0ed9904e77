"""Acceptance 4: two router instances in one group, the second joining mid-stream (a rebalance of
the input partitions) and a routing update while both run: markers from both, no record lost or
doubled, every record after its own router's marker of its epoch."""

from __future__ import annotations

import threading
import time

from conftest import WORKERS

from ballast.waiting import wait_until
from ballast.workload import input_events

N = 200_000
CHUNK = 10_000


def test_two_routers_with_a_rebalance(kit):
    events = list(input_events(N, num_keys=20_000, z=1.0, seed=17))
    produced = [0]

    def feed() -> None:
        for i in range(0, N, CHUNK):
            kit.produce_events(events[i : i + CHUNK])
            produced[0] = i + CHUNK
            time.sleep(0.3)

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    a = kit.start_thread("ra")
    wait_until(lambda: a.totals.offered >= 30_000, 120, "router ra routing 30,000 records", interval=0.05)
    b = kit.start_thread("rb")
    wait_until(lambda: b.totals.offered > 0, 120, "router rb getting a partition", interval=0.05)
    rebalanced_at = produced[0]
    table0 = kit.states[0].table
    kit.send_control(
        "ROUTING_UPDATE",
        {
            "assign": {e["key"]: (table0.route(e["key"].encode()) + 3) % WORKERS for e in events[:50]},
            "unassign": [],
            "reason": "t4",
        },
    )
    feeder.join(180)
    kit.wait_committed(N)
    ta, tb = a.totals, b.totals
    kit.stop_all()

    assert rebalanced_at < N, "the rebalance happened after the input ended; nothing was tested"
    assert ta.offered > 0 and tb.offered > 0
    routed = kit.read_routed(N)
    kit.verify(routed, events, {"ra", "rb"})
    by_router = {r["router_id"] for r in routed.data}
    assert by_router == {"ra", "rb"}
    for rid in ("ra", "rb"):  # both wrote markers, into every routed partition
        assert {m["partition"] for m in routed.markers if m["router_id"] == rid} == set(range(WORKERS))
