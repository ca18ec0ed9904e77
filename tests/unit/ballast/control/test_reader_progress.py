"""The reader's time limit is on lack of progress, not on total time (a scripted consumer, no broker).

A consumer that stops delivering below the end makes ``read_to_end`` fail after ``timeout`` without
a new offset; one that delivers slowly but steadily is read to its end, however long that takes.
The backward search for the latest snapshot is checked on the same scripted log.

Time is the script's: the reader's monotonic clock is the scripted log's :class:`Clock` that only the scripted
consumer moves (a poll that finds nothing lasts its whole timeout, a record takes ``every``), so the
tests judge when the reader gave up on that clock, not on how fast a shared machine ran them.
"""

from __future__ import annotations

import types

import confluent_kafka
import pytest

from ballast.control import log as control_log
from ballast.control import state as cs
from ballast.control.genesis import genesis_snapshot
from ballast.control.log import ControlLogReader
from ballast.kafka.configuration import KafkaConfig
from tests.support.scripted_log import ScriptedLog


def log_of(n: int, snapshot_at: int | None = None) -> list[dict]:
    events = [cs.make_event(0, *genesis_snapshot(4), issued_at=0)]
    state = cs.apply_event(cs.initial_state(4), events[0])
    for e in range(1, n):
        kind = cs.table_snapshot(state) if e == snapshot_at else cs.routing_update({f"k{e}": e % 4})
        events.append(cs.make_event(e, *kind, issued_at=0))
        state = cs.apply_event(state, events[-1])
    return events


def reader_on(monkeypatch, scripted: ScriptedLog, **kw) -> ControlLogReader:
    monkeypatch.setattr(confluent_kafka, "Consumer", scripted)
    monkeypatch.setattr(control_log, "time", types.SimpleNamespace(monotonic=scripted.clock.monotonic))
    return ControlLogReader(KafkaConfig.plaintext("scripted:1"), "c", cs.initial_state(4), **kw)


def test_a_reader_that_stops_moving_fails_after_the_timeout(monkeypatch):
    scripted = ScriptedLog(log_of(50), stall_at=30)
    reader = reader_on(monkeypatch, scripted, start_offset=0)
    with pytest.raises(cs.ControlLogError, match=r"no progress for 0\.5 s at offset 30 \(reading to 50\)"):
        reader.read_to_end(timeout=0.5)
    # it gave up more than 0.5 s after the last record, at the end of the poll (0.2 s) that passed it
    silent = scripted.clock.now - scripted.last_record_at
    assert 0.5 < silent <= 0.5 + 0.2 + 1e-9, silent
    assert reader.state.epoch == 29  # everything before the stall was folded


def test_a_slow_but_steady_reader_is_not_cut_off(monkeypatch):
    scripted = ScriptedLog(log_of(40), every=0.03)
    reader = reader_on(monkeypatch, scripted, start_offset=0)
    reader.read_to_end(timeout=0.3)  # 40 records x 30 ms: four times the timeout in total
    assert scripted.clock.now >= 40 * 0.03 - 1e-9  # the premise: it took that long, by the reader's clock
    assert reader.state.epoch == 39


def test_the_latest_snapshot_is_found_reading_backwards(monkeypatch):
    monkeypatch.setattr(control_log, "SCAN_CHUNK", 8)
    scripted = ScriptedLog(log_of(100, snapshot_at=37))
    reader = reader_on(monkeypatch, scripted)
    folded = reader.read_to_end()
    assert [e["epoch"] for e in folded] == list(range(37, 100))
    # the genesis first (it names the key that signs the log: one record), then chunks of 8, 16, 32,
    # 64 offsets from the end: [92, 100), [76, 92), [44, 76), [0, 44); then the fold
    assert scripted.reads == [0, 92, 76, 44, 0, 37]
    assert reader.state == cs.fold(cs.initial_state(4), log_of(100, snapshot_at=37))
