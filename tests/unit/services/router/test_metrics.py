"""RouterMetrics: one call per event keeps the run's totals, Prometheus and the key statistics equal."""

from __future__ import annotations

import pytest

from ballast.control.state import ControlState
from services.router.metrics import RouterMetrics

pytestmark = pytest.mark.unit


def _sample(m: RouterMetrics, name: str, **labels: str) -> float | None:
    return m.registry.get_sample_value(name, {"router_id": "r", **labels})


def test_one_batch_is_counted_the_same_everywhere():
    m = RouterMetrics("r", 3, heavy_hitter_capacity=10, heavy_hitters_top=5)
    keys = [b"a", b"a", b"b"]
    m.batch(
        [2, 0, 1],
        [20, 0, 10],
        keys,
        offered=6,
        shed=1,
        refetched=4,
        dead_reasons={"oversize": 2},
        seconds=0.01,
    )
    t = m.totals
    assert (t.offered, t.routed, t.shed, t.dead_lettered, t.refetched) == (6, 3, 1, 2, 4)
    assert _sample(m, "ballast_router_records_in_total") == 6
    assert _sample(m, "ballast_router_records_out_total") == 3
    assert _sample(m, "ballast_router_shed_total") == 1
    assert _sample(m, "ballast_router_dead_lettered_total", reason="oversize") == 2
    assert _sample(m, "ballast_router_partition_records_total", partition="0") == 2
    assert _sample(m, "ballast_router_partition_records_total", partition="1") is None  # never routed to
    body = m.snapshot(epoch=4)["body"][1]
    assert (body["offered_records"], body["kept_records"], body["dead_lettered"]) == (6, 3, 2)
    assert body["worker_records"] == [2, 0, 1] and body["epoch"] == 4
    assert body["heavy_hitters"][0]["key"] == "a" and body["heavy_hitters"][0]["count"] == 2
    assert m.snapshot(epoch=4)["body"][1]["offered_records"] == 0  # a new interval started


def test_epochs_markers_and_transactions():
    m = RouterMetrics("r", 2)
    m.epoch_applied(ControlState(num_workers=2, max_workers=2), initial=True)
    m.epoch_applied(ControlState(num_workers=1, max_workers=2, epoch=1, table={b"k": 0}))
    m.markers_written(2)
    m.transaction_committed()
    m.transaction_aborted()
    t = m.totals
    assert (t.epochs_applied, t.markers, t.transactions, t.aborts) == ([1], 2, 1, 1)
    assert _sample(m, "ballast_router_epoch") == 1 and _sample(m, "ballast_router_num_workers") == 1
    assert _sample(m, "ballast_router_markers_total") == 2
    assert _sample(m, "ballast_router_transaction_aborts_total") == 1
