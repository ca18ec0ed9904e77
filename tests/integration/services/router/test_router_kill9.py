"""Acceptance 3: kill -9 the router process mid-stream and restart it with the same id: still exactly
once (the restarted instance's init_transactions aborts the zombie's open transaction), with a routing
update after the restart, and a clean SIGTERM exit at the end."""

from __future__ import annotations

import json
import signal
import time
from collections import Counter

from conftest import WORKERS

from ballast.devstack.services import wait_ready
from ballast.waiting import wait_until
from ballast.workload import input_events

N = 200_000


def test_kill9_and_restart_keeps_exactly_once(kit):
    events = list(input_events(N, num_keys=20_000, z=1.0, seed=13))
    kit.produce_events(events[: N // 2])
    first = kit.start_process("r1")
    # wait until it is mid-stream: some offsets committed, not all
    def mid_stream() -> bool:
        kit.pipe.check_running(first)
        return kit.committed_total() >= 20_000

    wait_until(mid_stream, 120, "the router committing 20,000 offsets", interval=0.05)
    kit.pipe.kill(first, signal.SIGKILL)
    killed_at = kit.committed_total()
    assert killed_at < N // 2, "the router finished before the kill; nothing was tested"

    second = kit.start_process("r1")  # the same id: it fences the dead one's transactions
    # it says when it is ready, and how long Router.connect() took to get there
    announced = wait_ready(kit.pipe.state, second, 120)
    assert announced["router_id"] == "r1" and announced["epoch"] == 0
    assert 0 < announced["startup_s"] < time.time() - kit.pipe.service(second).started_at
    hot = [k for k, _ in Counter(e["key"] for e in events).most_common(50)]
    assign = {k: (kit.states[0].table.route(k.encode()) + 1) % WORKERS for k in hot}
    kit.wait_committed(N // 2)
    kit.send_control("ROUTING_UPDATE", {"assign": assign, "unassign": [], "reason": "after restart"})
    kit.produce_events(events[N // 2 :])
    kit.wait_committed(N)
    code = kit.pipe.stop(second)  # SIGTERM: it commits what is open and prints its totals
    assert code == 0, kit.pipe.log_tail(second)
    summary = json.loads(kit.pipe.output(second).strip().splitlines()[-1])
    assert summary["router_id"] == "r1" and summary["epochs_applied"] == [1]

    routed = kit.read_routed(N)
    kit.verify(routed, events, {"r1"})
    for key in hot:
        after = {r["partition"] for r in routed.data if r["key"] == key and r["epoch"] == 1}
        assert after == {assign[key]}
