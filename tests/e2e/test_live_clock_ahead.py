"""Event time in a live stream, end to end (routers and the reduce as processes, one broker):
one producer's clock 30 minutes ahead, and an input partition that never gets a record.

For 40 s, records stamped with the wall clock go to input partitions 0-2; every 2 s a producer
whose clock runs 30 minutes ahead writes one record into each of them; partition 3 stays empty.

* Every on-time record lands in a result row, and every window equals the reference over them.
  Failed on 8cbc131: the first record from the clock ahead moved Spark's watermark 30 minutes on
  (it was within the reduce's 1-hour bound), and every on-time record after it was
  dead-lettered ``too-late``.
* Every record from the clock ahead is dead-lettered ``future`` by the router, with its value,
  and none reaches a row.
* The empty partition holds results back only for the idle timeout: windows are written while
  the stream still runs, before any flush reached partition 3. The stream runs 40 s, and on past
  that until the first row is read (up to 4 more minutes): the idle rule counts routed-log time,
  so a reduce slowed by a loaded machine needs the stream to go on for the rule to fire, and a
  reduce that waited for partition 3 forever would never write a row.
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

import pytest

from ballast.avro.codec import AvroCodec
from ballast.kafka.clients import DeliveryTracker, make_producer, produce_waiting
from ballast.workload import FLUSH_KEY, flush_now
from tests.support.output_judge import assert_rows_right, judge
from tests.support.reduce_kit import ReduceKit

pytestmark = pytest.mark.e2e

SECONDS = 40
MORE_SECONDS = 240  # the most the stream runs on past SECONDS, waiting for the first row
RATE = 400  # on-time records per second, over partitions 0-2
AHEAD_MS = 30 * 60_000
WINDOW_MS = 2_000
DELAY_MS = 3_000
IDLE_MS = 8_000
KEYS = [f"live-{i:03d}" for i in range(60)]


def expected_windows(events: list[dict[str, Any]]) -> dict[tuple[str, int], dict[str, Any]]:
    """The reference: count, sum, min, max, mean per (key, tumbling window) of the given events."""
    cells: dict[tuple[str, int], list[float]] = defaultdict(list)
    for e in events:
        cells[(e["key"], e["event_time"] - e["event_time"] % WINDOW_MS)].append(e["value"])
    return {
        (k, s): {"count": len(v), "sum": sum(v), "min": min(v), "max": max(v), "mean": sum(v) / len(v),
                 "window_end": s + WINDOW_MS}
        for (k, s), v in cells.items()
    }  # fmt: skip


@pytest.fixture(scope="module")
def live(kafka_config, tmp_path_factory) -> Any:
    workdir = tmp_path_factory.mktemp("event-time")
    kit = ReduceKit(kafka_config, f"evt-{workdir.name}", workdir)
    codec = AvroCodec("io.ballast.InputEvent")
    producer = make_producer(kafka_config.with_client_id("evt-producer"), **{"linger.ms": 5})
    tracker = DeliveryTracker()
    on_time: list[dict[str, Any]] = []
    ahead: list[dict[str, Any]] = []
    try:
        kit.start_router("r1", max_future_ms=5_000)
        kit.start_router("r2", max_future_ms=5_000)
        kit.start_job(
            "agg", f"aggregate:size={WINDOW_MS // 1000}s", "--watermark-delay", f"{DELAY_MS // 1000} seconds",
            "--idle-timeout", f"{IDLE_MS // 1000} seconds",
        )  # fmt: skip
        for name in (*kit.commands,):
            kit.pipe.wait_ready(name, 300)
        started = time.monotonic()
        i = 0
        next_ahead = started + 1.0
        written_while_running = 0
        next_look = started + SECONDS
        while True:
            if time.monotonic() >= next_look:  # past SECONDS: stop at the first row written
                written_while_running = len(kit.rows("agg"))
                next_look = time.monotonic() + 2.0
                if written_while_running or time.monotonic() - started >= SECONDS + MORE_SECONDS:
                    break
            now = int(time.time() * 1000)
            for _ in range(RATE // 20):
                e = {"key": KEYS[i % len(KEYS)], "value": (i % 40) / 4, "payload": b"", "event_time": now}
                value, key = codec.encode(e), e["key"].encode()
                produce_waiting(producer, kit.input, value, key, tracker, partition=i % 3)
                on_time.append(e)
                i += 1
            if time.monotonic() >= next_ahead:
                next_ahead += 2.0
                for p in range(3):
                    e = {"key": "clock-ahead", "value": 1.0, "payload": b"", "event_time": now + AHEAD_MS}
                    value = codec.encode(e)
                    produce_waiting(producer, kit.input, value, b"clock-ahead", tracker, partition=p)
                    ahead.append(e)
            producer.poll(0)
            time.sleep(0.05)
        producer.flush(60)
        tracker.raise_if_failed()
        written_before_flush = written_while_running  # partition 3 has never had a record
        last = max(e["event_time"] for e in on_time)
        closing = last - last % WINDOW_MS + WINDOW_MS
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            kit.pipe.flush(flush_now(last, closing + DELAY_MS + 1_000 - last))
            if max((p.watermark_ms for p in kit.pipe.reduce_progress("agg")), default=0) >= closing:
                break
            time.sleep(2.0)
        expected = expected_windows(on_time)
        kit.wait_results("agg", expected, timeout=300)
        yield {
            "kit": kit, "on_time": on_time, "ahead": ahead, "expected": expected,
            "before_flush": written_before_flush,
        }  # fmt: skip
    finally:
        producer.flush(10)
        kit.close()


def test_every_on_time_record_is_in_a_row_despite_a_clock_30_minutes_ahead(live) -> None:
    kit: ReduceKit = live["kit"]
    rows = kit.rows("agg")
    assert_rows_right(judge(rows, live["expected"], live["expected"], ignore_keys=[FLUSH_KEY]))
    assert not [r for r in rows if r["key"] == "clock-ahead" or r["excluded_records"]]


def test_the_records_from_the_clock_ahead_are_dead_lettered_future_by_the_router(live) -> None:
    kit: ReduceKit = live["kit"]
    letters = kit.dead_lettered()
    assert {d.reason for d in letters} == {"future"}, {d.reason for d in letters}
    assert len(letters) == len(live["ahead"])
    assert all(d.topic == kit.input for d in letters)  # the input record, refused before routing


def test_an_input_partition_that_never_had_a_record_holds_results_only_for_the_idle_timeout(live) -> None:
    assert live["before_flush"] > 0
