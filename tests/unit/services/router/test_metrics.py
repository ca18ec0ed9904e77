"""RouterMetrics: one call per event keeps the run's totals, Prometheus and the key statistics equal."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ballast.control.state import ControlState
from ballast.devstack.processes import free_port
from services.router.config import RouterSettings
from services.router.metrics import RouterMetrics

pytestmark = pytest.mark.unit


def _sample(m: RouterMetrics, name: str, **labels: str) -> float | None:
    return m.registry.get_sample_value(name, {"router_id": "r", **labels})


def test_one_batch_is_counted_the_same_everywhere():
    m = RouterMetrics("r", 3, heavy_hitter_capacity=10, heavy_hitters_top=5)
    keys = [b"a", b"a", b"b", b"c"]  # offered with a valid key; one of them was shed
    m.batch(
        [2, 0, 1],
        [20, 0, 10],
        keys,
        offered=6,
        shed=1,
        refetched=4,
        dead_reasons={"oversize": 2},
        seconds=0.01,
        epoch=4,
    )
    t = m.totals
    assert (t.offered, t.routed, t.shed, t.dead_lettered, t.refetched) == (6, 3, 1, 2, 4)
    assert _sample(m, "ballast_router_records_in_total") == 6
    assert _sample(m, "ballast_router_records_out_total") == 3
    assert _sample(m, "ballast_router_shed_total") == 1
    assert _sample(m, "ballast_router_dead_lettered_total", reason="oversize") == 2
    assert _sample(m, "ballast_router_partition_records_total", partition="0") == 2
    assert _sample(m, "ballast_router_partition_records_total", partition="1") is None  # never routed to
    body = m.stats_record(epoch=4)["body"][1]
    assert (body["offered_records"], body["kept_records"], body["dead_lettered"]) == (6, 3, 2)
    assert body["worker_records"] == [2, 0, 1] and body["epoch"] == 4 and body["first_epoch"] == 4
    assert body["heavy_hitters"][0]["key"] == "a" and body["heavy_hitters"][0]["count"] == 2
    # the sketch saw the offered keys, the shed one included, and says so
    assert {h["key"] for h in body["heavy_hitters"]} == {"a", "b", "c"} and body["sketch_records"] == 4
    m.committed(transaction=True)  # the transaction carrying the record commits: a new interval
    assert m.stats_record(epoch=4)["body"][1]["offered_records"] == 0


def _offer(m: RouterMetrics, key: bytes, n: int, epoch: int = 1) -> None:
    m.batch(
        [n, 0], [n, 0], [key] * n, offered=n, shed=0, refetched=0, dead_reasons={}, seconds=0, epoch=epoch
    )


def _stats(m: RouterMetrics, epoch: int = 1) -> dict:
    return m.stats_record(epoch)["body"][1]


def test_an_aborted_transaction_neither_loses_nor_double_counts():
    m = RouterMetrics("r", 2, heavy_hitter_capacity=10, heavy_hitters_top=5)
    _offer(m, b"a", 5)
    m.committed(transaction=True)
    _offer(m, b"b", 7)  # in a transaction that aborts: these records are read again
    m.transaction_aborted()
    _offer(m, b"b", 7)
    m.committed(transaction=True)
    body = _stats(m)
    assert body["offered_records"] == 12 and body["worker_records"] == [12, 0]
    assert {h["key"]: h["count"] for h in body["heavy_hitters"]} == {"a": 5, "b": 7}


def test_a_statistics_record_lost_with_its_transaction_is_rendered_again_in_full():
    m = RouterMetrics("r", 2, heavy_hitter_capacity=10, heavy_hitters_top=5)
    _offer(m, b"a", 5)
    m.committed(transaction=True)
    _offer(m, b"a", 1)
    assert _stats(m)["offered_records"] == 6  # written into the open transaction ...
    m.transaction_aborted()  # ... which aborts, record included: the interval did not end
    _offer(m, b"a", 1)
    assert _stats(m)["offered_records"] == 6
    m.committed(transaction=True)
    assert _stats(m)["offered_records"] == 0


def test_a_statistics_record_names_the_epochs_it_spans():
    m = RouterMetrics("r", 2, heavy_hitter_capacity=10, heavy_hitters_top=5)
    _offer(m, b"a", 1, epoch=3)
    m.committed(transaction=False)
    _offer(m, b"a", 1, epoch=5)
    body = _stats(m, epoch=6)
    assert (body["first_epoch"], body["epoch"]) == (3, 6)
    m.committed(transaction=False)
    body = _stats(m, epoch=6)
    assert (body["first_epoch"], body["epoch"]) == (6, 6)  # nothing routed: the current epoch


def test_epochs_markers_and_transactions():
    m = RouterMetrics("r", 2, heavy_hitter_capacity=10, heavy_hitters_top=5)
    m.epoch_applied(ControlState(num_workers=2, max_workers=2), initial=True)
    m.epoch_applied(ControlState(num_workers=1, max_workers=2, epoch=1, table={b"k": 0}))
    m.markers_written(2)
    m.committed(transaction=True)
    m.transaction_aborted()
    t = m.totals
    assert (t.epochs_applied, t.markers, t.transactions, t.aborts) == ([1], 2, 1, 1)
    assert _sample(m, "ballast_router_epoch") == 1 and _sample(m, "ballast_router_num_workers") == 1
    assert _sample(m, "ballast_router_markers_total") == 2
    assert _sample(m, "ballast_router_transaction_aborts_total") == 1


def test_the_key_statistics_record_at_the_default_heavy_hitter_count_fits_a_kafka_record():
    """The planner needs thousands of heavy hitters (its table's reach), so the router publishes
    2,000 by default. A key can be long: at 200-byte keys the record must still fit the broker's
    default ``message.max.bytes`` (1 MiB) with room to spare, or the statistics would be refused."""
    from ballast.avro.codec import AvroCodec
    from services.router.config import RouterSettings

    defaults = RouterSettings(router_id="r")
    top = defaults.heavy_hitters_top
    assert top >= 2000
    m = RouterMetrics("r", 8, defaults.heavy_hitter_capacity, top)
    keys = [f"{i:0200d}".encode() for i in range(top) for _ in range(3)]
    m.batch([len(keys)] + [0] * 7, [0] * 8, keys, len(keys), 0, 0, {}, 0.01, 1)
    m.committed(True)
    record = m.stats_record(epoch=1)
    assert len(record["body"][1]["heavy_hitters"]) == top
    size = len(AvroCodec("io.ballast.MetricsRecord").encode(record))
    assert 200 * top < size < 1_048_576 // 2


def listening_address(port: int) -> str | None:
    """The IPv4 address a socket listens on at ``port``, read from the kernel (/proc/net/tcp)."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        addr, hex_port = local.split(":")
        if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
            return ".".join(str(int(addr[i : i + 2], 16)) for i in (6, 4, 2, 0))
    return None


@pytest.mark.skipif(not os.path.exists("/proc/net/tcp"), reason="reads listening sockets from /proc (Linux)")
@pytest.mark.parametrize("host", [None, "0.0.0.0"])
def test_the_prometheus_endpoint_binds_loopback_unless_told_otherwise(host) -> None:
    port = free_port()
    m = RouterMetrics("r", 2, heavy_hitter_capacity=10, heavy_hitters_top=5)
    if host is None:
        m.start(port)
    else:
        m.start(port, host)
    assert listening_address(port) == (host or "127.0.0.1")
    assert RouterSettings().metrics_host == "127.0.0.1"  # what the router passes by default


def test_useful_time_follows_its_records_through_commits_and_aborts():
    """DS2's useful time is the routed batches' time without queue waits, and it belongs to the
    records: an aborted transaction's batches are routed again, with time of their own, so their
    first time is dropped with their counts (offered ÷ useful stays the rate of the work kept)."""
    m = RouterMetrics("r", 2, heavy_hitter_capacity=10, heavy_hitters_top=5)
    m.batch([5, 0], [5, 0], [b"a"] * 5, 5, 0, 0, {}, seconds=0.5, useful_s=0.2)  # 0.3 s on a full queue
    m.committed(transaction=True)
    m.batch([7, 0], [7, 0], [b"b"] * 7, 7, 0, 0, {}, seconds=0.4, useful_s=0.4)
    m.transaction_aborted()
    m.batch([7, 0], [7, 0], [b"b"] * 7, 7, 0, 0, {}, seconds=0.1)  # no wait measured: all of it
    body = _stats(m)
    assert body["offered_records"] == 12 and body["useful_ms"] == 300
