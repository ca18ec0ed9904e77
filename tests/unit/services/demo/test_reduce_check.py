"""The demo's reduce check: ground truth per key, window ownership, the expected moves, and the
report's JSON form. Pure: the output, stats and dead letters are given as the demo reads them."""

from __future__ import annotations

import pytest

from ballast.metrics.records import WorkerStats
from ballast.settings import SettingsError
from ballast.workload import FLUSH_AHEAD_MS, FLUSH_KEY, flush_event
from services.demo.check import auto_watermark_delay, check_reduce, key_totals
from services.demo.report import DemoReport, ReduceSummary
from services.demo.settings import DemoSettings

EVENTS = [
    {"key": "a", "value": 1.5, "event_time": 1_000},
    {"key": "a", "value": 2.25, "event_time": 12_000},
    {"key": "b", "value": 4.0, "event_time": 13_000},
    {"key": "a", "value": 0.1, "event_time": 21_000},
]
# a moved from worker 1 to 3 at epoch 1; b never moved (worker 2)
WRITES = {
    ("a", 0, 10_000): [(3, 1, 1.5)],
    ("a", 10_000, 20_000): [(3, 1, 2.25)],
    ("a", 20_000, 30_000): [(3, 1, 0.1)],
    ("b", 10_000, 20_000): [(2, 1, 4.0)],
}
MOVES = {"a": (1, 3), "b": (2, 2)}  # key -> (hash home, pinned worker): b is pinned at home


def stats(worker, *, installed=(), sent=(), step=1, **extra) -> WorkerStats:
    """A worker step as the metrics reader types it."""
    base = {
        "worker": worker,
        "epoch": 1,
        "records": 1,
        "busy_ms": 1.0,
        "state_bytes": 0,
        "state_keys": 0,
        "spark_partition": worker,
        "step": step,
        "late_records": 0,
        "duplicate_chunks": 0,
        "pending_keys": 0,
        "chunks_sent": list(sent),
        "chunks_installed": list(installed),
        "held_records": 0,
    }
    return WorkerStats.of({**base, **extra})


STATS = [
    stats(1, sent=[{"key": "a", "epoch": 1, "worker": 3, "bytes": 40}]),
    stats(3, installed=[{"key": "a", "epoch": 1, "worker": 1, "bytes": 40}]),
    stats(2),
]


def summary() -> ReduceSummary:
    return ReduceSummary("job", "aggregate:size=10s", "50 seconds", "2 seconds", 2, FLUSH_KEY)


def checked(writes=WRITES, st=STATS, dead=None, moves=MOVES) -> ReduceSummary:
    s = summary()
    check_reduce(s, key_totals(EVENTS), writes, st, dead or {}, moves, plan_epoch=1)
    return s


def test_an_exact_output_passes():
    s = checked()
    assert (s.keys_expected, s.keys_checked, s.windows) == (2, 2, 4)
    assert (s.count_mismatches, s.sum_mismatches, s.split_windows, s.unexpected_keys) == (0, 0, 0, 0)
    assert (s.chunks_sent, s.chunks_installed, s.chunk_bytes, s.keys_moved) == (1, 1, 40, ["a"])
    assert (s.moves_expected, s.moves_missing) == (1, [])
    assert s.ok


def test_counts_must_be_exact_and_sums_close():
    short = {**WRITES, ("a", 20_000, 30_000): [(3, 0, 0.0)]}
    s = checked(short)
    assert (s.count_mismatches, s.sum_mismatches) == (1, 1) and not s.ok
    # a merged sum may differ in the last bits: tolerated; a real difference is not
    s = checked({**WRITES, ("b", 10_000, 20_000): [(2, 1, 4.0 * (1 + 1e-12))]})
    assert s.sum_mismatches == 0 and 0 < s.max_sum_error < 1e-6 and s.ok
    s = checked({**WRITES, ("b", 10_000, 20_000): [(2, 1, 4.001)]})
    assert s.sum_mismatches == 1 and not s.ok


def test_a_key_without_windows_fails():
    s = checked({k: v for k, v in WRITES.items() if k[0] != "b"})
    assert (s.keys_checked, s.keys_expected) == (1, 2) and not s.ok


def test_a_window_from_two_workers_fails_and_rewrites_use_the_last_value():
    s = checked({**WRITES, ("a", 0, 10_000): [(1, 1, 1.5), (3, 1, 1.5)]})
    assert (s.split_windows, s.rewritten_windows) == (1, 1) and not s.ok
    s = checked({**WRITES, ("a", 0, 10_000): [(3, 1, 9.0), (3, 1, 1.5)]})
    assert (s.split_windows, s.rewritten_windows, s.sum_mismatches) == (0, 1, 0) and s.ok


def test_a_moved_key_must_be_installed_where_it_was_pinned_from_its_home():
    s = checked(st=[stats(1), stats(2)])
    assert s.moves_missing == ["a"] and s.chunks_installed == 0 and not s.ok
    wrong_sender = [stats(3, installed=[{"key": "a", "epoch": 1, "worker": 2, "bytes": 40}])]
    assert checked(st=wrong_sender).moves_missing == ["a"]


def test_flush_key_is_not_unexpected_but_other_keys_are():
    s = checked({**WRITES, (FLUSH_KEY, 0, 1): [(0, 1, 0.0)]})
    assert s.unexpected_keys == 0 and s.ok
    s = checked({**WRITES, ("zz", 0, 10_000): [(0, 1, 0.0)]})
    assert s.unexpected_keys == 1 and not s.ok


def test_late_records_dead_letters_misplaced_steps_and_pending_keys_fail():
    assert not checked(st=[*STATS, stats(2, step=2, late_records=3)]).ok
    assert not checked(dead={"misrouted": 1}).ok
    assert not checked(st=[*STATS, stats(2, step=2, spark_partition=5)]).ok
    pending = checked(st=[*STATS, stats(2, step=2, pending_keys=1)])
    assert pending.pending_keys == 1 and not pending.ok
    # only each worker's last step counts for keys still waiting
    assert checked(st=[stats(2, step=1, pending_keys=1), *STATS[:2], stats(2, step=2)]).ok


def test_flush_event_and_watermark_delay_come_from_the_input():
    events = [{"key": "a", "value": 1.0, "event_time": 1_000 + i} for i in range(5_001)]
    flush = flush_event(max(e["event_time"] for e in events), seq=len(events))
    assert flush["key"] == FLUSH_KEY and flush["payload"] == (5_001).to_bytes(8, "big")
    assert flush["event_time"] == 6_000 + FLUSH_AHEAD_MS
    assert auto_watermark_delay(events) == "3 seconds"  # half of 5 s, rounded up
    assert auto_watermark_delay(events[:2]) == "1 seconds"


def test_report_round_trips_through_json_with_the_reduce(tmp_path):
    report = DemoReport("b", "t.routed", 8, 10, load_by_epoch={0: [1] * 8, 1: [1] * 8}, reduce=checked())
    report.write_json(tmp_path / "r.json")
    back = DemoReport.read_json(tmp_path / "r.json")
    assert back == report and back.ok
    report.reduce.error = "the reduce query stopped"
    assert report.routing_ok and not report.ok


def test_processor_settings_need_tumbling_windows():
    assert DemoSettings.from_args(env={}).reduce
    assert not DemoSettings.from_args(env={"BALLAST_DEMO_REDUCE": "false"}).reduce
    with pytest.raises(SettingsError, match="tumbling"):
        DemoSettings.from_args(env={"BALLAST_DEMO_PROCESSOR": "aggregate:size=10s,slide=5s"})
    with pytest.raises(SettingsError, match="unknown processor"):
        DemoSettings.from_args(env={"BALLAST_DEMO_PROCESSOR": "median:size=10s"})
