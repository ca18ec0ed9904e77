"""The harness's view of the routed topic counts what routers of an older release write: their
markers announce epochs (``MarkerWatch``) and their data records are routed records
(``routed_records``), whatever ``RoutedEnvelope`` version wrote them."""

from __future__ import annotations

from ballast.harness.routed import MarkerWatch, routed_records
from ballast.kafka.clients import make_producer
from ballast.waiting import wait_until
from tests.support.old_formats import envelope_value

ROUTED = 2


def test_markers_and_records_of_every_release_are_seen(kafka_config, topic_factory) -> None:
    inputs = topic_factory("in", partitions=3)
    routed = topic_factory("routed", partitions=ROUTED)
    producer = make_producer(kafka_config)
    # input partition p routed by a router of version p + 2 (v1 markers cover nothing: left out)
    for w in range(ROUTED):
        for p, version in enumerate((2, 3, 4)):
            covers = [{"topic": inputs, "partition": p, "event_time": None}]
            marker = {"epoch": 5 + p, "router_id": f"r{version}", "worker": w, "marker_time": 1,
                      "covers": covers, "shed": []}  # fmt: skip
            producer.produce(routed, envelope_value(version, "EpochMarker", marker), partition=w)
    times = []
    for i, version in enumerate((1, 2, 3, 4, 1, 2)):
        record = {"key": f"k{i}", "value": 1.0, "payload": b"", "event_time": 1000 + i, "epoch": 5,
                  "router_id": "r", "source_topic": inputs, "source_partition": 0,
                  "source_offset": i}  # fmt: skip
        producer.produce(routed, envelope_value(version, "DataRecord", record), partition=i % ROUTED)
        times.append((1000 + i, i % ROUTED))
    assert producer.flush(30) == 0

    watch = MarkerWatch(kafka_config, routed, (inputs,))
    try:
        ends = watch.follower.end_offsets()

        def read_all() -> bool:
            watch.poll()
            return watch.follower.next == ends

        wait_until(read_all, 30, "every marker read")
        # the lowest of the three input partitions' epochs, in both routed partitions
        assert [watch.frontier(w) for w in range(ROUTED)] == [5, 5] and watch.lowest() == 5
    finally:
        watch.close()
    got_times, got_workers = routed_records(kafka_config, routed, timeout=60)
    assert sorted(zip(got_times, got_workers, strict=True)) == sorted(times)
