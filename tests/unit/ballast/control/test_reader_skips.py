"""A control record that is no event is skipped, counted and handed on; the next event applies.

Issue 28, item 3: one record of junk on the control topic made every reader raise (routers exited,
reduce tasks failed, a restarted controller could not read its own log). These drive the reader
over a scripted topic (no broker); tests/integration/services/controller/test_control_junk.py does
it to a live pipeline.
"""

from __future__ import annotations

import confluent_kafka

from ballast.avro.codec import AvroCodec
from ballast.control import log as control_log
from ballast.control import state as cs
from ballast.control.genesis import genesis_snapshot
from ballast.control.log import ControlLogReader, SkippedRecord
from ballast.kafka.configuration import KafkaConfig
from tests.support.scripted_log import ScriptedLog

INPUT_EVENT = AvroCodec("io.ballast.InputEvent").encode(
    {"key": "k", "value": 1.0, "event_time": 5, "payload": b""}
)


def ev(epoch: int, kind: tuple[str, dict]) -> dict:
    return cs.make_event(epoch, *kind, issued_at=0)


def genuine(n: int) -> list[dict]:
    return [ev(0, genesis_snapshot(4))] + [ev(e, cs.routing_update({f"k{e}": e % 4})) for e in range(1, n)]


def reader_on(monkeypatch, scripted: ScriptedLog, **kw) -> tuple[ControlLogReader, list[SkippedRecord]]:
    monkeypatch.setattr(confluent_kafka, "Consumer", scripted)
    seen: list[SkippedRecord] = []
    kafka = KafkaConfig.plaintext("scripted:1")
    reader = ControlLogReader(kafka, "c", cs.initial_state(4), on_skip=seen.append, **kw)
    return reader, seen


def test_junk_between_events_is_skipped_and_the_next_event_applies(monkeypatch):
    events = genuine(6)
    invalid = ev(3, cs.routing_update({"x": 9}))  # worker 9 of 4: no state could take it
    ahead = ev(40, cs.routing_update({"y": 1}))  # not the next epoch
    records = [events[0], events[1], b"hello", events[2], None, INPUT_EVENT, invalid, ahead, events[3],
               b"\xc3\x01" + b"\x00" * 20, events[4], events[5]]  # fmt: skip
    reader, seen = reader_on(monkeypatch, ScriptedLog(records), start_offset=0)
    folded = reader.read_to_end(5)
    assert [e["epoch"] for e in folded] == [0, 1, 2, 3, 4, 5]
    assert reader.state == cs.fold(cs.initial_state(4), events)
    assert [(s.offset, s.reason) for s in seen] == [
        (2, "undecodable"), (4, "undecodable"), (5, "undecodable"), (6, "invalid-event"), (7, "epoch-gap"),
        (9, "undecodable"),
    ]  # fmt: skip
    assert reader.skipped == {"undecodable": 4, "invalid-event": 1, "epoch-gap": 1}
    assert seen[0].value == b"hello" and seen[0].key == b"2" and "truncated" in seen[0].detail
    assert reader.next_offset == len(records)


def test_junk_at_the_end_does_not_hide_the_latest_snapshot(monkeypatch):
    monkeypatch.setattr(control_log, "SCAN_CHUNK", 4)
    events = genuine(20)
    state = cs.fold(cs.initial_state(4), events[:12])
    events[12:] = [ev(12, cs.table_snapshot(state))]
    events += [ev(e, cs.routing_update({f"k{e}": 1})) for e in range(13, 20)]
    records = [*events[:14], b"junk", *events[14:], b"junk", b"\xc3\x01junk-with-a-header"]
    reader, seen = reader_on(monkeypatch, ScriptedLog(records))
    folded = reader.read_to_end(5)
    assert [e["epoch"] for e in folded] == list(range(12, 20))
    assert reader.state == cs.fold(cs.initial_state(4), events)
    assert [s.offset for s in seen] == [14, 21, 22]  # the search passes junk silently; the fold says it
    assert reader.records_read >= len(records) - 12


def test_a_reader_with_the_history_starts_at_the_latest_snapshot_that_has_it(monkeypatch):
    """The reduce and the control writers: a snapshot without a history is no start for them; with
    ``before_epoch`` none after it is; and a log with none folds from its origin."""
    builder = cs.StateBuilder(cs.initial_state(4), history=True)
    events = []
    for e in range(0, 40):
        if e == 0:
            event = ev(0, genesis_snapshot(4))
        elif e in (10, 25):  # as the controller writes them
            event = ev(e, cs.table_snapshot(builder.state()))
        elif e == 33:  # as a writer that did not follow the history writes one
            event = ev(e, cs.table_snapshot(cs.ControlState(**{**builder.state().__dict__, "history": None})))
        else:
            event = ev(e, cs.routing_update({f"k{e % 7}": e % 4}))
        builder.apply(event)
        events.append(event)
    for kw, start in (({}, 25), ({"before_epoch": 24}, 10), ({"before_epoch": 9}, 0)):
        reader, _ = reader_on(monkeypatch, ScriptedLog(events), history=True, **kw)
        folded = reader.read_to_end(5)
        assert folded[0]["epoch"] == start and reader.start_offset == start
        assert reader.state.history == builder.history
    reader, _ = reader_on(monkeypatch, ScriptedLog(events))
    assert reader.read_to_end(5)[0]["epoch"] == 33 and reader.state.history is None
