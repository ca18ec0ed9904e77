"""Acceptance 2: 200,000 records with a routing update moving 50 keys (the hottest among them) in
the middle; exactly once under read_committed, old partition before the marker, new one after, per-key
order kept. Also checks the Prometheus endpoint and the key statistics on the metrics topic."""

from __future__ import annotations

import urllib.request
from collections import Counter

from conftest import WORKERS

from ballast.avro.codec import AvroCodec
from ballast.devstack.processes import free_port
from ballast.waiting import wait_until
from ballast.workload import input_events

N = 200_000


def test_routing_update_mid_stream_exactly_once(kit):
    events = list(input_events(N, num_keys=20_000, z=1.0, seed=11))
    freq = Counter(e["key"] for e in events)
    ranked = [k for k, _ in freq.most_common()]
    moved = ranked[:25] + ranked[1000:1025]  # the hottest keys and some lukewarm ones
    state0 = kit.states[0]
    assign = {k: (state0.table.route(k.encode()) + 1) % WORKERS for k in moved}

    port = free_port()
    kit.produce_events(events[: N // 2])
    router = kit.start_thread("r1", metrics_port=port)
    kit.wait_committed(N // 2)
    kit.send_control("ROUTING_UPDATE", {"assign": assign, "unassign": [], "reason": "test"})
    wait_until(lambda: router.state.epoch >= 1, 60, "the router applying epoch 1", interval=0.05)
    kit.produce_events(events[N // 2 :])
    kit.wait_committed(N)
    scrape = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    kit.stop_all()

    routed = kit.read_routed(N)
    kit.verify(routed, events, {"r1"})
    # each moved key: records before the marker in the old partition, after it in the new one
    for key in moved:
        recs = sorted((r["payload"][:8], r["partition"], r["epoch"]) for r in routed.data if r["key"] == key)
        old, new = state0.table.route(key.encode()), assign[key]
        before = [p for _, p, e in recs if e == 0]
        after = [p for _, p, e in recs if e == 1]
        assert set(before) <= {old} and set(after) <= {new}
        assert before and after, f"key {key}: {len(before)} records before, {len(after)} after the update"
        # in input order, all epoch-0 records precede all epoch-1 records
        epochs = [e for _, _, e in recs]
        assert epochs == sorted(epochs)
    # Prometheus: one scrape, figures equal to what the router routed
    assert f'ballast_router_records_in_total{{router_id="r1"}} {float(N)}' in scrape
    assert 'ballast_router_epoch{router_id="r1"} 1.0' in scrape
    assert f'ballast_router_table_size{{router_id="r1"}} {float(len(moved))}' in scrape
    # key statistics: per-interval records add up to the input, heavy hitters include the hottest key
    codec = AvroCodec("io.ballast.MetricsRecord")
    stats = [codec.decode(m.value())["body"] for m in kit.read_topic(kit.layout.name("metrics"), 1)]
    stats = [body for branch, body in stats if branch == "io.ballast.RouterKeyStats"]
    assert sum(s["offered_records"] for s in stats) == N
    assert sum(sum(s["worker_records"]) for s in stats) == N
    per_worker = [0] * WORKERS
    for r in routed.data:
        per_worker[r["partition"]] += 1
    assert [sum(s["worker_records"][w] for s in stats) for w in range(WORKERS)] == per_worker
    hottest = ranked[0]
    assert any(h["key"] == hottest for s in stats for h in s["heavy_hitters"])
