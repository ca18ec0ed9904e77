"""The migration benchmark's pure parts: the story read from the log, the figures, the stale table."""

from __future__ import annotations

import pytest

from ballast.routing.murmur2 import kafka_partition
from bench.migration.figures import batch_rows, mode_figures, state_moved
from bench.migration.story import migration_story
from bench.migration.stream import stale_pins

pytestmark = pytest.mark.unit


def _event(epoch: int, at: int, etype: str, body: dict) -> dict:
    return {"epoch": epoch, "issued_at": at, "type": etype, "payload": ("x", body)}


def _marker(epoch: int, at: int, mid: str, phase: str, keys: list[str]) -> dict:
    body = {"migration_id": mid, "phase": phase, "keys": keys, "from_workers": [0] * len(keys),
            "to_workers": [1] * len(keys), "reason": ""}  # fmt: skip
    return _event(epoch, at, "MIGRATION_STEP", body)


def _update(epoch: int, at: int, mid: str, assign: dict, unassign: list) -> dict:
    body = {"assign": assign, "unassign": unassign, "reason": "", "migration_id": mid}
    return _event(epoch, at, "ROUTING_UPDATE", body)


LOG = [
    _update(1, 1_000, "", {"a": 1, "b": 2, "c": 3}, []),  # the stale table: no migration
    _marker(2, 10_000, "m1", "START", ["x", "a", "b"]),
    _update(3, 10_000, "m1", {"x": 1}, ["a"]),
    _marker(4, 14_000, "m1", "STATE_SENT", ["x", "a"]),
    _update(5, 14_000, "m1", {}, ["b"]),
    _marker(6, 17_500, "m1", "STATE_SENT", ["b"]),
    _marker(7, 17_500, "m1", "DONE", ["x", "a", "b"]),
    _update(8, 20_000, "", {"y": 1}, []),  # after the migration: not part of it
]


def test_the_story_is_the_bracket_and_the_steps_of_the_first_migration_after_the_pins():
    s = migration_story(LOG, after_epoch=1)
    assert s is not None
    assert (s["migration_id"], s["keys"], s["start_ms"], s["end_ms"], s["end_phase"]) == (
        "m1", 3, 10_000, 17_500, "DONE",
    )  # fmt: skip
    assert [(x["epoch"], x["keys"]) for x in s["steps"]] == [(3, ["x", "a"]), (5, ["b"])]
    assert s["state_sent"] == 2 and s["not_installed"] == 0
    assert migration_story(LOG, after_epoch=7) is None


def test_a_migration_still_in_flight_has_no_end():
    s = migration_story(LOG[:4], after_epoch=1)
    assert s is not None and s["end_phase"] == "" and s["end_ms"] is None and len(s["steps"]) == 1


def _sample(at: int, installed: list[tuple[str, int, int]], pending: int = 0) -> dict:
    return {
        "at_ms": at, "worker": 0, "records": 10, "pending_keys": pending, "held_records": 0,
        "state_bytes": 0, "state_keys": 0, "chunks_sent": [],
        "chunks_installed": [{"key": k, "epoch": e, "bytes": b} for k, e, b in installed],
    }  # fmt: skip


def test_state_moved_counts_each_installed_chunk_of_the_migration_once():
    s = migration_story(LOG, after_epoch=1)
    samples = [
        _sample(11_000, [("x", 3, 100), ("a", 3, 40)]),
        _sample(12_000, [("x", 3, 100)]),  # a replayed batch installs nothing twice: counted once
        _sample(15_000, [("b", 5, 60), ("y", 8, 1_000), ("a", 1, 999)]),  # other moves: not counted
    ]
    assert state_moved(s, samples) == {"bytes": 200, "keys": 3}


def test_figures_split_the_batches_at_start_and_done():
    s = migration_story(LOG, after_epoch=1)
    batches = [  # (start, duration): input began at 0, settle 2 s
        (1_000, 900), (3_000, 1_000), (5_000, 1_200), (7_000, 1_000), (9_500, 1_000),  # before START
        (11_000, 4_000),  # during
        (16_000, 1_500),  # during (ends after DONE)
        (18_000, 800), (19_000, 700),  # after
        (30_000, 5_000),  # after the input stopped: not counted
    ]  # fmt: skip
    progress = [{"id": i, "start_ms": a, "duration_ms": d, "rows": 1} for i, (a, d) in enumerate(batches)]
    samples = [_sample(11_500, [("x", 3, 100)], pending=2), _sample(16_500, [("b", 5, 60)], pending=1)]
    rows = batch_rows(progress, samples)
    assert [r["pending_keys"] for r in rows][5:7] == [2, 1] and rows[5]["installed_bytes"] == 100
    f = mode_figures(rows, s, samples, feed_start_ms=0, feed_end_ms=25_000, settle_s=2.0)
    # 9,500 + 1,000 ends after START (10,000): it overlaps the migration
    assert f["steady_batches"] == 3 and f["steady_p50_ms"] == 1_000
    assert f["during_batches"] == 3 and f["peak_ms"] == 4_000 and f["peak_over_steady"] == 4.0
    assert f["after_batches"] == 2 and f["after_p50_ms"] == 750
    assert f["migration_s"] == 7.5 and f["steps"] == 2 and f["epochs"] == [3, 5] and f["log_epochs"] == 6
    assert f["state_bytes_moved"] == 160 and f["pending_keys_max"] == 2


def test_the_stale_table_pins_away_from_the_hash_home_and_is_the_same_every_time():
    pins = stale_pins(10_000, 1.0, 11, 40, 8)
    assert len(pins) == 40 and pins == stale_pins(10_000, 1.0, 11, 40, 8)
    assert all(w != kafka_partition(k.encode(), 8) and 0 <= w < 8 for k, w in pins.items())


def test_cpu_per_batch_is_compared_like_the_durations():
    s = migration_story(LOG, after_epoch=1)
    batches = [(3_000, 1_000, 2.0), (5_000, 1_000, 4.0), (7_000, 1_000, 3.0), (11_000, 2_000, 9.0),
               (14_000, 1_000, 6.0), (18_000, 1_000, 2.5)]  # fmt: skip
    progress = [
        {"id": i, "start_ms": a, "duration_ms": d, "rows": 1, "cpu_s": c}
        for i, (a, d, c) in enumerate(batches)
    ]
    rows = batch_rows(progress, [])
    f = mode_figures(rows, s, [], feed_start_ms=0, feed_end_ms=25_000, settle_s=2.0)
    assert (f["cpu_steady_p50_s"], f["cpu_during_p50_s"], f["cpu_during_max_s"]) == (3.0, 7.5, 9.0)
    assert f["cpu_during_over_steady"] == 2.5 and f["cpu_after_p50_s"] == 2.5
