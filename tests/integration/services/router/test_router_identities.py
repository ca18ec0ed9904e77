"""Two deployments on one cluster, each with a router ``r1`` started as a user starts it
(``ballast router run --router-id r1 --prefix P``, no group or transactional id given): both route
everything exactly once and neither fences the other, because each one's consumer group and
transactional.id carry its deployment's prefix (``P.routers``, ``P.routers.r1``). With the old
defaults both were ``ballast-router`` and ``ballast-router.ballast-router.r1``: the second start
fenced the first, which stopped at its next commit.

Judged from outside: the routed records against the events produced (the kit's verifier), the
offsets committed under the group the deployment's name promises, and the groups the broker knows.
"""

from __future__ import annotations

from typing import Any

from ballast.devstack.services import wait_ready
from ballast.waiting import wait_until
from ballast.workload import input_events

N = 20_000


def test_the_same_router_id_in_two_deployments_fences_nobody(kit_factory: Any, admin: Any):
    a, b = kit_factory("ida"), kit_factory("idb")
    events = list(input_events(N, num_keys=2_000, z=1.0, seed=5))
    a.produce_events(events[: N // 2])
    b.produce_events(events[: N // 2])
    first = a.start_process("r1")
    wait_ready(a.pipe.state, first, 120)
    a.wait_committed(N // 2, timeout=120)  # a has committed transactions before b's r1 starts
    second = b.start_process("r1")
    wait_ready(b.pipe.state, second, 120)
    a.produce_events(events[N // 2 :])  # a must commit again after b's init_transactions
    b.produce_events(events[N // 2 :])
    for kit, name in ((a, first), (b, second)):

        def done(kit: Any = kit, name: str = name) -> bool:
            kit.pipe.check_running(name)  # a fenced router exits: this raises with its log
            return kit.committed_total() >= N

        wait_until(done, 120, f"{name} of {kit.prefix} committing {N} offsets", 0.3)
    for kit, name in ((a, first), (b, second)):
        code = kit.pipe.stop(name)  # SIGTERM: commits what is open and exits 0
        assert code == 0, kit.pipe.log_tail(name)
        kit.verify(kit.read_routed(N), events, {"r1"})
    groups = {g.group_id for g in admin.list_consumer_groups().result().valid}
    for kit in (a, b):
        assert {g for g in groups if kit.prefix in g} == {f"{kit.prefix}.routers"}, groups
