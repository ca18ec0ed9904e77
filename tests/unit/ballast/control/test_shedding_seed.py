"""The seed of a shedding setting travels with it: request -> controller -> event -> fold -> snapshot.

The routers keep a record iff its draw under the seed is below the keep-probability
(ballast/routing/shedding_sample.py), so every reader must fold the same seed, a snapshot must
carry it, and records written before the field existed must still decode (as seed 0).
"""

from __future__ import annotations

import json

import pytest

from ballast.avro.codec import AvroCodec, SchemaVersion
from ballast.cli.console import UsageError
from ballast.cli.main import build_parser
from ballast.control import state as cs
from ballast.control.cli import parse_request, request_body
from ballast.control.genesis import genesis_snapshot
from ballast.paths import SCHEMAS_DIR
from services.controller.sequencer import Request, Sequencer, decode_request

pytestmark = pytest.mark.unit

GENESIS = cs.make_event(0, "TABLE_SNAPSHOT", {"num_workers": 4, "table": {}, "keep_probability": {},
                                               "routed_partitions": 4, "shed_seed": {}})  # fmt: skip


def ev(epoch: int, kind: tuple[str, dict]) -> dict:
    return cs.make_event(epoch, *kind, issued_at=1)


def folded(*events: dict) -> cs.ControlState:
    return cs.fold(cs.initial_state(4), [GENESIS, *events])


def test_the_fold_keeps_each_targets_seed_and_star_stands_in():
    s = folded(ev(1, cs.shedding("in", 0.5, seed=7)), ev(2, cs.shedding("*", 0.8, seed=9)))
    assert (s.keep_for("in"), s.seed_for("in")) == (0.5, 7)
    assert (s.keep_for("other"), s.seed_for("other")) == (0.8, 9)  # the `*` setting, its seed
    s = cs.apply_event(s, ev(3, cs.shedding("in", 0.6)))  # a new setting with seed 0
    assert s.seed_for("in") == 0
    assert folded().seed_for("in") == 0


def test_an_event_without_a_seed_means_seed_0():
    body = {"target": "in", "keep_probability": 0.5, "reason": ""}  # built by an older writer
    assert folded(ev(1, ("SHEDDING", body))).seed_for("in") == 0


def test_a_snapshot_carries_the_seeds_and_a_reader_starting_there_folds_the_same_state():
    s = folded(ev(1, cs.shedding("in", 0.5, seed=7)), ev(2, cs.shedding("*", 0.25, seed=-3)))
    kind, body = cs.table_snapshot(s)
    assert body["shed_seed"] == {"in": 7, "*": -3}
    codec = AvroCodec(cs.CONTROL_SCHEMA)
    snapshot = codec.decode(codec.encode(ev(3, (kind, body))))
    fresh = cs.fold(cs.initial_state(4), [snapshot])  # a reader that starts at the snapshot
    assert dict(fresh.shed_seed) == {"in": 7, "*": -3}
    assert (fresh.seed_for("in"), fresh.seed_for("x"), fresh.keep_for("x")) == (7, -3, 0.25)


def test_the_event_as_written_and_as_read_back_are_the_same_content():
    """The digest (duplicate detection) of an event the controller built equals the digest of the
    same event decoded from the log: the builders write every field the schema defaults."""
    codec = AvroCodec(cs.CONTROL_SCHEMA)
    s = folded(ev(1, cs.shedding("in", 0.5, seed=7)))
    written = [ev(1, cs.shedding("in", 0.5, seed=7)), ev(2, cs.table_snapshot(s)), ev(0, genesis_snapshot(4))]
    for event in written:
        assert cs.event_digest(codec.decode(codec.encode(event))) == cs.event_digest(event)


def old_version(name: str) -> SchemaVersion:
    return SchemaVersion.from_json(json.loads((SCHEMAS_DIR / "previous" / name).read_text()))


def test_events_of_the_previous_schema_decode_with_seed_0():
    old = old_version("control_event.v3.avsc")
    codec = AvroCodec(cs.CONTROL_SCHEMA)
    assert old.fingerprint != codec.schema.fingerprint
    assert codec.store.by_fingerprint(old.fingerprint) is not None
    shed = {"target": "in", "keep_probability": 0.5, "reason": "r"}
    decoded = codec.decode(AvroCodec(old).encode(ev(1, ("SHEDDING", shed))))
    assert decoded["payload"] == ("io.ballast.Shedding", {**shed, "seed": 0})
    snap = {"num_workers": 4, "table": {}, "keep_probability": {"in": 0.5}, "routed_partitions": 4}
    decoded = codec.decode(AvroCodec(old).encode(ev(0, ("TABLE_SNAPSHOT", snap))))
    assert decoded["payload"][1]["shed_seed"] == {}
    assert cs.fold(cs.initial_state(4), [decoded]).seed_for("in") == 0


def test_requests_of_the_previous_schema_decode_without_a_seed():
    old = old_version("control_request.v1.avsc")
    request = {
        "request_id": "q1",
        "issuer": "old-shedder",
        "issued_at": 1,
        "expected_epoch": None,
        "kind": "SHEDDING",
        "payload": ("io.ballast.SheddingRequest", {"target": "in", "keep_probability": 0.5, "reason": ""}),
    }
    got = decode_request(AvroCodec(old).encode(request), b"q1", 0)
    assert isinstance(got, Request) and got.body["seed"] is None


def shed(rid: str, target: str, p: float, seed: int | None = None) -> Request:
    body = {"target": target, "keep_probability": p, "reason": "", "seed": seed}
    return Request(rid, "t", "SHEDDING", body, None, "io.ballast.SheddingRequest", 50)


def test_the_controller_keeps_the_seed_in_force_unless_a_request_names_one():
    s = Sequencer(folded(), "controller-test")
    seeds = []
    for rid, target, p, seed in [
        ("a", "in", 0.5, None),  # first setting, no seed: 0
        ("b", "in", 0.4, 11),  # named: 11
        ("c", "in", 0.7, None),  # a step up keeps 11: the sample grows, nested
        ("d", "*", 0.9, 5),
        ("e", "other", 0.6, None),  # `other` was shed under `*`'s seed: keep it
        ("f", "in", 1.0, None),  # lifted, still 11
    ]:
        answer = s.answer(shed(rid, target, p, seed), 1)
        assert answer.accepted, answer
        seeds.append(answer.event["payload"][1]["seed"])
    assert seeds == [0, 11, 11, 5, 5, 11]
    assert (s.state.seed_for("in"), s.state.seed_for("other"), s.state.seed_for("x")) == (11, 5, 5)


def test_a_request_without_the_seed_field_is_a_request_without_a_seed():
    body = {"target": "in", "keep_probability": 0.5, "reason": ""}  # a sender of the old schema
    s = Sequencer(folded(ev(1, cs.shedding("in", 0.3, seed=4))), "controller-test")
    answer = s.answer(Request("a", "t", "SHEDDING", body, None, "io.ballast.SheddingRequest", 50), 1)
    assert answer.event["payload"][1]["seed"] == 4


def send_args(*argv: str):
    return build_parser().parse_args(["control", "send", *argv])


def test_control_send_passes_the_seed():
    kind, body = request_body(parse_request(send_args("--shed", "in=0.5", "--shed-seed", "42")))
    assert (kind, body["target"], body["keep_probability"], body["seed"]) == ("SHEDDING", "in", 0.5, 42)
    kind, body = request_body(parse_request(send_args("--shed", "in=0.5")))
    assert body["seed"] is None  # the controller keeps the seed in force
    with pytest.raises(UsageError, match="only with --shed"):
        parse_request(send_args("--scale", "3", "--shed-seed", "1"))
    # and the request encodes (the seed is a nullable long)
    codec = AvroCodec("io.ballast.ControlRequest")
    raw = {"request_id": "x", "issuer": "t", "issued_at": 1, "expected_epoch": None, "kind": kind,
           "payload": ("io.ballast.SheddingRequest", body)}  # fmt: skip
    assert codec.decode(codec.encode(raw))["payload"][1]["seed"] is None
