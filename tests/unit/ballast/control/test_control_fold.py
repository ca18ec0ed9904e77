"""The control-log fold: dense epochs, gaps and conflicting duplicates stop the reader, snapshots."""

from __future__ import annotations

import pytest

from ballast.avro.codec import AvroCodec
from ballast.control import state as cl
from ballast.routing.murmur2 import kafka_partition


def ev(epoch: int, kind: tuple[str, dict]) -> dict:
    return cl.make_event(epoch, *kind, issued_at=1)


def test_fold_applies_every_kind_in_order():
    s = cl.ControlState(num_workers=4, max_workers=8)
    s = cl.fold(
        s,
        [
            ev(1, cl.routing_update({"a": 3, "b": 1})),
            ev(2, cl.scale(8)),
            ev(3, cl.routing_update({"c": 7}, unassign=["a"])),
            ev(4, cl.shedding("in", 0.25)),
        ],
    )
    assert (s.epoch, s.num_workers) == (4, 8)
    # F(k) at epoch 4: b and c pinned, a back on the 8-worker hash, d never pinned
    assert [s.table.route(k) for k in (b"b", b"c")] == [1, 7]
    assert s.table.route(b"a") == kafka_partition(b"a", 8)
    assert s.table.route(b"d") == kafka_partition(b"d", 8)
    # the table holds bytes keys and only deviations from the hash
    assert all(isinstance(k, bytes) and w != kafka_partition(k, 8) for k, w in s.table.items())
    assert s.keep_for("in") == 0.25 and s.keep_for("other") == 1.0


def test_gap_and_conflicting_duplicate_raise_identical_duplicate_is_ignored():
    s = cl.fold(cl.ControlState(num_workers=4), [ev(1, cl.routing_update({"a": 1}))])
    with pytest.raises(cl.ControlLogError, match="gap"):
        cl.apply_event(s, ev(3, cl.routing_update({"b": 1})))
    assert cl.apply_event(s, ev(1, cl.routing_update({"a": 1}))) is s
    with pytest.raises(cl.ControlLogError, match="duplicate"):
        cl.apply_event(s, ev(1, cl.routing_update({"a": 2})))


def test_invalid_events_are_refused():
    s = cl.ControlState(num_workers=4, max_workers=8)
    with pytest.raises(cl.ControlLogError):
        cl.apply_event(s, ev(1, cl.routing_update({"a": 4})))
    with pytest.raises(cl.ControlLogError):
        cl.apply_event(s, ev(1, cl.scale(9)))
    with pytest.raises(cl.ControlLogError):
        cl.apply_event(s, ev(1, cl.shedding("x", 1.5)))
    s2 = cl.apply_event(s, ev(1, cl.routing_update({"a": 3})))
    with pytest.raises(cl.ControlLogError, match="out of range"):
        cl.apply_event(s2, ev(2, cl.scale(2)))


def test_reader_may_start_at_a_snapshot_but_not_elsewhere():
    full = cl.fold(cl.ControlState(num_workers=4), [ev(1, cl.routing_update({"a": 1})), ev(2, cl.scale(6))])
    snap = ev(3, cl.table_snapshot(full))
    fresh = cl.ControlState(num_workers=4)
    s = cl.apply_event(fresh, snap)
    assert (s.epoch, s.num_workers, s.table.route(b"a")) == (3, 6, 1)
    assert s.table == full.table
    with pytest.raises(cl.ControlLogError, match="gap"):
        cl.apply_event(fresh, ev(3, cl.scale(5)))


def test_events_round_trip_through_the_control_schema():
    codec = AvroCodec(cl.CONTROL_SCHEMA)
    for kind in (
        cl.routing_update({"k": 1}, ["j"], "r"),
        cl.scale(3),
        cl.shedding("t", 0.5),
        cl.table_snapshot(cl.ControlState(num_workers=2, table={"x": 1})),
    ):
        e = ev(1, kind)
        assert codec.decode(codec.encode(e)) == e


def test_keys_that_cannot_be_routed_are_refused():
    s = cl.ControlState(num_workers=4)
    with pytest.raises(cl.ControlLogError, match="cannot be routed"):
        cl.apply_event(s, ev(1, cl.routing_update({"": 1})))


def test_scale_keeps_every_pin_and_drops_pins_equal_to_the_new_hash():
    """Decision: a pinned key keeps its worker across SCALE; the table stays deviations-only."""
    keys = [f"k{i}" for i in range(200)]
    pins = {k: (kafka_partition(k.encode(), 4) + 1) % 3 for k in keys}  # workers 0..2: valid after SCALE 3
    s = cl.fold(cl.ControlState(num_workers=4), [ev(1, cl.routing_update(pins)), ev(2, cl.scale(3))])
    assert all(s.table.route(k.encode()) == w for k, w in pins.items())
    assert all(w != kafka_partition(k, 3) for k, w in s.table.items())
    assert len(s.table) < len(pins)  # some pins equal the 3-worker hash: no entry needed


def genesis(routed: int, active: int = 0) -> dict:
    body = {"num_workers": active or routed, "table": {}, "routed_partitions": routed}
    return ev(0, ("TABLE_SNAPSHOT", body))


def test_the_genesis_is_epoch_0_and_sets_the_routed_partitions():
    """The log's first event states epoch 0: whatever the reader assumed is replaced by it."""
    for assumed in (cl.ControlState(num_workers=1), cl.initial_state(8), cl.initial_state(8, 2)):
        s = cl.apply_event(assumed, genesis(8, 4))
        assert (s.epoch, s.num_workers, s.max_workers, s.started, len(s.table)) == (0, 4, 8, True, 0)
        assert cl.apply_event(s, genesis(8, 4)) is s  # an identical second genesis is a re-send
        with pytest.raises(cl.ControlLogError, match="different content"):
            cl.apply_event(s, genesis(8, 6))
        s = cl.apply_event(s, ev(1, cl.scale(8)))  # epochs are dense from 1 after it
        with pytest.raises(cl.ControlLogError, match="exceed the 8 routed partitions"):
            cl.apply_event(s, ev(2, cl.scale(9)))
    # a reader that knows the routed topic refuses a log recorded for another one
    with pytest.raises(cl.ControlLogError, match="records 6 routed partitions, the reader has 8"):
        cl.apply_event(cl.initial_state(8), genesis(6))


def test_table_snapshot_records_the_routed_partitions():
    s = cl.fold(cl.initial_state(8), [genesis(8), ev(1, cl.routing_update({"a": 3}))])
    kind, body = cl.table_snapshot(s)
    assert body["routed_partitions"] == 8
    assert cl.is_base_snapshot(ev(2, (kind, body))) and cl.is_base_snapshot(genesis(3))
    assert not cl.is_base_snapshot(ev(2, cl.table_snapshot(cl.ControlState(num_workers=2))))
    assert not cl.is_base_snapshot(ev(2, cl.scale(2)))


def test_a_snapshot_written_before_routed_partitions_existed_still_decodes():
    """Records of the previous ControlEvent schema read with routed_partitions = 0 (unknown)."""
    import json

    from ballast.avro.codec import SchemaVersion
    from ballast.paths import SCHEMAS_DIR

    old_file = SCHEMAS_DIR / "previous" / "control_event.v1.avsc"
    old = SchemaVersion.from_json(json.loads(old_file.read_text()))
    assert old.fingerprint != AvroCodec(cl.CONTROL_SCHEMA).schema.fingerprint
    # every process knows the previous version without registering it itself
    assert AvroCodec(cl.CONTROL_SCHEMA).store.by_fingerprint(old.fingerprint) is not None
    body = {"num_workers": 2, "table": {"x": 1}, "keep_probability": {}}
    data = AvroCodec(old).encode(ev(5, ("TABLE_SNAPSHOT", body)))
    decoded = AvroCodec(cl.CONTROL_SCHEMA).decode(data)
    expected = {**body, "routed_partitions": 0, "shed_seed": {}, "history": None}
    assert decoded["payload"] == ("io.ballast.TableSnapshot", expected)
    assert not cl.is_base_snapshot(decoded)
