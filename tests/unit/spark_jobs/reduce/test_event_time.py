"""A worker's event time follows the slowest input partition (spark_jobs/reduce/event_time.py):
a stalled or lagging router delays results instead of making records late, a silent partition is
left out after the idle timeout (counted in routed-log time, not the worker's clock), and no data
record moves the watermark by itself. The truth in each case is stated by the test: which records
were offered, on which partition, and what each window holds."""

from __future__ import annotations

import pytest

from ballast.routing.murmur2 import kafka_partition
from spark_jobs.processors.aggregate import WindowAggregate
from spark_jobs.processors.windows import WindowSpec
from tests.support.engine_rows import N, Worker, data, marker, view_with

pytestmark = pytest.mark.unit

P = ("in:0", "in:1")
KEYS = [f"k{i}" for i in range(200) if kafka_partition(f"k{i}".encode(), N) == 0][:2]
A, B = KEYS  # A's records come through in:0, B's through in:1
DELAY, IDLE = 2_000, 30_000


def worker(idle: int = IDLE) -> Worker:
    return Worker(0, view_with(), WindowAggregate(WindowSpec(1_000)), partitions=P,
                  watermark_delay_ms=DELAY, idle_timeout_ms=idle)  # fmt: skip


def at(part: str, t: int, log: int) -> dict:
    """A progress marker of ``part`` saying it has come to event time ``t``, appended at ``log``."""
    return marker(0, 0, part, times={part: t}, timestamp=log)


def rec(key: str, t: int, log: int) -> dict:
    return {**data(key, 1.0, t, 0), "timestamp": log}


def windows(result) -> dict[tuple[str, int], int]:
    return {(r.key, r.window_start): r.count for r in result.results.rows()}


# --- the clock alone ----------------------------------------------------------------------------


def test_the_watermark_is_the_slowest_partitions_progress_minus_the_delay_and_never_goes_back() -> None:
    from spark_jobs.reduce.event_time import EventClock

    clock = EventClock(P, None, delay_ms=100, idle_ms=0)
    clock.saw_log_time(5)
    clock.announce("in:0", 10_000, 5)
    assert clock.watermark(0) == 0  # in:1 has shown nothing: it holds
    clock.announce("in:1", 4_000, 6)
    assert clock.watermark(0) == 3_900
    clock.announce("in:1", 3_000, 7)  # a lower announcement (a new owner that read less) changes nothing
    assert clock.watermark(3_900) == 3_900
    clock.announce("other:0", 1, 8)  # not an input of this job
    assert clock.watermark(3_900) == 3_900


def test_a_partition_silent_for_the_idle_timeout_of_log_time_is_left_out_and_all_silent_holds() -> None:
    from spark_jobs.reduce.event_time import EventClock

    clock = EventClock(P, None, delay_ms=0, idle_ms=1_000)
    clock.announce("in:0", 5_000, 100)
    clock.announce("in:1", 1_000, 100)
    clock.saw_log_time(100)
    assert clock.watermark(0) == 1_000
    clock.announce("in:0", 6_000, 1_099)
    clock.saw_log_time(1_099)
    assert clock.watermark(0) == 1_000 and clock.idle() == []  # 999 ms of silence: not yet
    clock.announce("in:0", 7_000, 1_100)
    clock.saw_log_time(1_100)
    assert clock.idle() == ["in:1"] and clock.watermark(0) == 7_000
    clock.saw_log_time(5_000)  # in:0 silent too now
    assert set(clock.idle()) == set(P) and clock.watermark(7_000) == 7_000
    state = clock.state()
    again = EventClock(P, state, delay_ms=0, idle_ms=1_000)  # kept in the meta: a restart decides the same
    assert again.state() == state and again.watermark(7_000) == 7_000


# --- the engine ---------------------------------------------------------------------------------


def test_a_stalled_partition_delays_results_and_makes_nothing_late() -> None:
    """in:1's router stalls for 6 s of event time (3x the delay, well within the idle timeout)
    while in:0 runs on: nothing is late or dropped, the windows wait, and when in:1 catches up
    every window holds every record. Failed before: the watermark was the highest event time read
    minus the delay, so B's records of seconds 1-5 came 4 s behind it and were dead-lettered."""
    w = worker()
    out = [w.step([at("in:0", 0, 0), at("in:1", 0, 0)], watermark=None)]
    for s in range(1, 8):  # in:0 routes A's records of seconds 1..7; in:1 is stalled
        rows = [rec(A, s * 1_000 + 10, s * 1_000), at("in:0", s * 1_000 + 10, s * 1_000)]
        out.append(w.step(rows, watermark=None))
    assert all(not o.dead for o in out) and all(not o.results.rows() for o in out)  # nothing closes
    assert out[-1].stats["watermark_ms"] == 0
    # in:1 comes back with its backlog of seconds 1..7
    back = [rec(B, s * 1_000 + 20, 8_000) for s in range(1, 8)]
    final = w.step([*back, at("in:1", 7_020, 8_000)], watermark=None)
    assert final.dead == []
    assert windows(final) == {(k, s * 1_000): 1 for k in (A, B) for s in range(1, 5)}


def test_an_idle_partition_is_left_out_after_the_idle_timeout_and_results_come() -> None:
    w = worker(idle=3_000)
    w.step([at("in:0", 0, 0), at("in:1", 0, 0)], watermark=None)
    seen: dict = {}
    for s in range(1, 8):
        o = w.step([rec(A, s * 1_000, s * 1_000), at("in:0", s * 1_000, s * 1_000)], watermark=None)
        seen.update(windows(o))
        if s < 3:
            assert not windows(o)  # in:1 not idle yet: it holds
    assert seen == {(A, s * 1_000): 1 for s in range(1, 5)}  # after 3 s of log time, in:0 alone rules


def test_a_backlog_read_in_pieces_does_not_look_idle() -> None:
    """The reduce restarts after 60 s down and reads the backlog in capped batches: in:1's markers
    are further on in the partition. Log time advances only as far as read, so in:1 is not idle
    and none of its records is late."""
    w = worker(idle=3_000)
    w.step([at("in:0", 0, 0), at("in:1", 0, 0)], watermark=None)
    backlog = []
    for s in range(1, 60):
        backlog += [rec(A, s * 1_000, s * 1_000), at("in:0", s * 1_000, s * 1_000)]
        backlog += [rec(B, s * 1_000 + 5, s * 1_000 + 5), at("in:1", s * 1_000 + 5, s * 1_000 + 5)]
    dead = []
    for lo in range(0, len(backlog), 7):  # a cap that splits every partition's run
        dead += w.step(backlog[lo : lo + 7], watermark=None).dead
    assert dead == []


def test_no_single_record_moves_the_watermark() -> None:
    """A record 30 minutes ahead reached the worker (a router of this version refuses it; one
    written by anything else is not trusted): the watermark stays with the markers, and on-time
    records after it land in their windows."""
    w = worker()
    w.step([at("in:0", 0, 0), at("in:1", 0, 0), rec(A, 30 * 60_000, 0)], watermark=None)
    counted: dict = {}
    for s in range(1, 6):
        o = w.step(
            [rec(A, s * 1_000, s * 1_000), rec(B, s * 1_000, s * 1_000), at("in:0", s * 1_000, s * 1_000),
             at("in:1", s * 1_000, s * 1_000)], watermark=None,
        )  # fmt: skip
        assert o.dead == []
        counted.update(windows(o))
    assert counted == {(k, s * 1_000): 1 for k in (A, B) for s in range(1, 3)}  # watermark 5 s - 2 s


def test_progress_read_in_a_batch_counts_though_the_batch_ends_long_after_it() -> None:
    """A backlog read at once that ends with records appended minutes later (state chunks written
    again, say): every partition advanced in the batch and then went silent. The watermark keeps
    what they showed; the silence after it only holds it there. Found by replaying an end-to-end
    run's routed topic: the replaying job's watermark stayed where its first batches left it."""
    w = worker()
    rows = [at("in:0", 0, 0), at("in:1", 0, 0)]
    for s in range(1, 30):
        rows += [rec(A, s * 1_000, s * 1_000), at("in:0", s * 1_000, s * 1_000)]
        rows += [rec(B, s * 1_000, s * 1_000), at("in:1", s * 1_000, s * 1_000)]
    rows.append(rec(A, 29_500, 300_000))  # appended five minutes later
    out = w.step(rows, watermark=None)
    assert out.stats["watermark_ms"] == 29_000 - DELAY
