"""What a router's markers say besides epochs, on fake clients: how far each owned input partition
has come in event time, what it shed (and for which routed partition), and which records it refuses
because their clocks run ahead of its own. Judged by reading what a read_committed consumer of the
routed and dead-letter topics would see, against the test's own input."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaError, KafkaException, Message

from ballast.avro.wire import INPUT_HEADER, encode_input_body
from ballast.control.state import make_event, routing_update, shedding
from ballast.kafka.dead_letters import REASON, SOURCE_OFFSET
from ballast.routing.murmur2 import kafka_partition
from ballast.routing.shedding_sample import keeps
from tests.support.router_fakes import DEAD, make_router, play, routed

pytestmark = pytest.mark.unit

NOW = int(time.time() * 1000)


@pytest.fixture(autouse=True)
def _now() -> None:
    """Each test's records are timed from its own start: the suite may reach this module long
    after it was imported, and a record "30 minutes ahead" must still be ahead when routed."""
    global NOW
    NOW = int(time.time() * 1000)


def event(partition: int, offset: int, event_ms: int, key: bytes | None = None) -> Message:
    key = key if key is not None else f"k{offset}".encode()
    value = INPUT_HEADER + encode_input_body(key, 1.0, b"", event_ms)
    return Message(topic="in", partition=partition, offset=offset, key=key, value=value)


def markers(router) -> list[dict]:
    return [b for branch, b in routed(router) if branch == "io.ballast.EpochMarker"]


def progress_of(marker: dict) -> dict[tuple[str, int], int | None]:
    return {(c["topic"], c["partition"]): c["event_time"] for c in marker["covers"]}


def seconds(span: dict) -> range:
    return range(span["first"] // 1000, span["last"] // 1000 + 1)


def dead(router) -> list[tuple[str, int]]:
    out = []
    for s in router.producer.sent:
        if s.topic == DEAD:
            h = dict(s.headers)
            out.append((h[REASON].decode(), int(h[SOURCE_OFFSET])))
    return out


def test_a_record_from_a_clock_ahead_is_dead_lettered_and_moves_no_progress():
    router = make_router(
        exactly_once=True, committed={("in", 0): 0}, max_future_ms=5_000, progress_interval_ms=0
    )
    batch = [event(0, 0, NOW - 1_000), event(0, 1, NOW + 30 * 60_000), event(0, 2, NOW + 2_000)]
    batch.append(event(0, 3, 5))  # 1970: a short varint, decoded on the general path
    play(router, ("assign", [("in", 0)]), ("batch", batch))
    assert dead(router) == [("future", 1)]
    data = [b["source_offset"] for branch, b in routed(router) if branch == "io.ballast.DataRecord"]
    assert data == [0, 2, 3]
    last = markers(router)[-1]
    # the 30-minute record is in no marker: the highest read is the one 2 s ahead
    assert progress_of(last) == {("in", 0): NOW + 2_000}


def test_without_a_bound_every_record_is_routed():
    router = make_router(exactly_once=True, committed={("in", 0): 0}, max_future_ms=0, progress_interval_ms=0)
    play(router, ("assign", [("in", 0)]), ("batch", [event(0, 0, NOW + 3_600_000)]))
    assert dead(router) == []
    assert progress_of(markers(router)[-1]) == {("in", 0): NOW + 3_600_000}


def test_markers_at_commit_say_each_owned_partitions_highest_event_time_in_every_routed_partition():
    router = make_router(exactly_once=True, committed={("in", 0): 0, ("in", 1): 0}, progress_interval_ms=0)
    play(
        router,
        ("assign", [("in", 0), ("in", 1)]),
        # out of order within partition 0; small (short varint) times on partition 1
        ("batch", [event(0, 0, NOW - 500), event(0, 1, NOW - 900), event(1, 0, 1_234), event(1, 1, 77)]),
    )
    last = markers(router)[-4:]
    assert sorted(m["worker"] for m in last) == [0, 1, 2, 3]
    for m in last:
        assert progress_of(m) == {("in", 0): NOW - 500, ("in", 1): 1_234}
    # the first markers (before any record was read) say nothing of progress yet
    assert progress_of(markers(router)[0]) == {("in", 0): None, ("in", 1): None}


def test_shed_records_are_reported_to_the_partition_routing_would_have_sent_them_to():
    router = make_router(exactly_once=True, committed={("in", 0): 0})
    router.control.reader.events.append(make_event(1, *shedding("in", 0.5, seed=9)))  # type: ignore[attr-defined]
    batch = [event(0, o, NOW - 60_000 + 10 * o, key=f"k{o % 7}".encode()) for o in range(200)]
    play(router, ("assign", [("in", 0)]), ("batch", batch))
    shed = {o for o in range(200) if not keeps(0.5, 9, "in", 0, o)}
    assert 50 < len(shed) < 150
    want: dict[int, set[int]] = {}
    for o in shed:
        worker = kafka_partition(f"k{o % 7}".encode(), 4)
        want.setdefault(worker, set()).add((NOW - 60_000 + 10 * o) // 1000)
    got: dict[int, set[int]] = {}
    for m in markers(router):
        for span in m["shed"]:
            assert span["topic"] == "in" and span["keep"] == 0.5
            assert span["first"] % 1000 == 0 and span["last"] % 1000 == 999
            got.setdefault(m["worker"], set()).update(seconds(span))
    assert got == want
    # shed records count as read: the progress is the highest of all 200
    assert progress_of(markers(router)[-1]) == {("in", 0): NOW - 60_000 + 10 * 199}


def test_spans_of_records_routed_under_an_epoch_come_before_the_next_epochs_marker():
    router = make_router(exactly_once=True, committed={("in", 0): 0})
    reader = router.control.reader  # type: ignore[attr-defined]
    reader.events.append(make_event(1, *shedding("in", 0.5, seed=3)))
    router.consumer.script = [  # type: ignore[attr-defined]
        ("assign", [("in", 0)]),
        ("batch", [event(0, o, NOW - 5_000 + o) for o in range(100)]),
        ("batch", [event(0, o, NOW - 4_000 + o) for o in range(100, 200)]),
    ]
    router.start()
    router.step()  # epoch 1 applied, 100 records routed or shed in an open transaction
    reader.events.append(make_event(2, *routing_update({"k0": 1}, [], "move")))
    router.step()  # epoch 2: its markers end the transaction
    router.stop()
    router.run()
    seen_spans = False
    for m in markers(router):
        if m["epoch"] == 2:
            break
        seen_spans = seen_spans or bool(m["shed"])
    first_two = [m for m in markers(router) if m["epoch"] == 2][:4]
    # the spans of epoch 1's records travel in epoch 2's first markers at the latest
    assert seen_spans or any(m["shed"] for m in first_two)


def test_an_aborted_interval_takes_its_progress_and_spans_with_it():
    router = make_router(exactly_once=True, committed={("in", 0): 0}, progress_interval_ms=0)
    router.control.reader.events.append(make_event(1, *shedding("in", 0.5, seed=5)))  # type: ignore[attr-defined]
    first = [event(0, o, NOW - 10_000 + 100 * o) for o in range(50)]
    router.consumer.script = [("assign", [("in", 0)]), ("batch", first), ("batch", first[:10])]  # type: ignore[attr-defined]
    router.start()
    router.step()  # offsets 0..49 in an open transaction
    router.producer.fail_commit.append(  # type: ignore[attr-defined]
        KafkaException(KafkaError(KafkaError._FENCED, "injected", txn_requires_abort=True))
    )
    router.checkpoint.commit()  # aborts: back to offset 0
    router.step()  # only 0..9 again
    router.stop()
    router.run()
    last = markers(router)[-1]
    assert progress_of(last) == {("in", 0): NOW - 10_000 + 100 * 9}
    reported = {s for m in markers(router) for span in m["shed"] for s in seconds(span)}
    assert reported == {
        (NOW - 10_000 + 100 * o) // 1000 for o in range(10) if not keeps(0.5, 5, "in", 0, o)
    }


def test_progress_held_back_by_the_interval_is_announced_once_it_passes_though_no_input_comes():
    """The last records' progress must not wait for more input (or the statistics interval): an
    idle router opens an interval to announce it once --progress-interval-ms has passed."""
    router = make_router(
        exactly_once=True, committed={("in", 0): 0}, progress_interval_ms=200, commit_interval_ms=1
    )
    router.consumer.script = [("assign", [("in", 0)]), ("batch", [event(0, 0, NOW - 5_000)])]  # type: ignore[attr-defined]
    router.start()
    router.step()  # assignment: markers (no progress yet), then the record
    router.step()
    router.checkpoint.commit()
    said = [progress_of(m)[("in", 0)] for m in markers(router)]
    assert NOW - 5_000 not in said  # within the interval of the first markers: held back
    time.sleep(0.25)
    for _ in range(3):  # idle turns: nothing to consume (a real consume() waits --poll-timeout-ms)
        router.step()
        time.sleep(0.01)
    assert progress_of(markers(router)[-1]) == {("in", 0): NOW - 5_000}
