"""The controller's decisions: dense epochs, each request id applied once, every refusal a reason.

Each refusal kind is its own case (acceptance 7 asks for at least ten kinds answered with a
rejection and the log unchanged); the expected epochs and states are written out by hand."""

from __future__ import annotations

import pytest

from ballast.avro.codec import AvroCodec
from ballast.control.state import ControlState, fold, make_event, routing_update
from ballast.routing.murmur2 import kafka_partition
from services.controller.sequencer import REFUSALS, Request, RequestLimits, Sequencer, decode_request

pytestmark = pytest.mark.unit

GENESIS = make_event(0, "TABLE_SNAPSHOT", {"num_workers": 4, "table": {}, "keep_probability": {},
                                            "routed_partitions": 8})  # fmt: skip


def fresh(**kw) -> Sequencer:
    state = fold(ControlState(num_workers=4, max_workers=8), [GENESIS])
    return Sequencer(state, "controller-test", **kw)


def update(rid: str, assign=None, unassign=(), expected=None) -> Request:
    body = {"assign": dict(assign or {}), "unassign": list(unassign), "reason": ""}
    return Request(rid, "t", "ROUTING_UPDATE", body, expected, "io.ballast.RoutingUpdateRequest", 100)


def scale(rid: str, n: int) -> Request:
    return Request(rid, "t", "SCALE", {"num_workers": n, "reason": ""}, None, "io.ballast.ScaleRequest", 50)


def shed(rid: str, target: str, p: float) -> Request:
    body = {"target": target, "keep_probability": p, "reason": ""}
    return Request(rid, "t", "SHEDDING", body, None, "io.ballast.SheddingRequest", 50)


def test_accepted_requests_get_dense_epochs_and_carry_their_id():
    s = fresh()
    a = s.answer(update("r1", {"k": 2}), 1)
    b = s.answer(scale("r2", 6), 2)
    c = s.answer(shed("r3", "in", 0.5), 3)
    assert [x.epoch for x in (a, b, c)] == [1, 2, 3] and all(x.accepted for x in (a, b, c))
    assert [x.event["request_id"] for x in (a, b, c)] == ["r1", "r2", "r3"]
    assert (s.state.epoch, s.state.num_workers, s.state.keep_for("in")) == (3, 6, 0.5)
    assert s.state.table.route(b"k") == 2


def test_a_resend_gets_the_first_answer_and_changes_nothing():
    s = fresh()
    first = s.answer(update("r1", {"k": 2}), 1)
    again = s.answer(update("r1", {"k": 3}), 2)  # same id, other content: still the first answer
    assert (again.accepted, again.duplicate, again.epoch, again.event) == (True, True, first.epoch, None)
    assert s.state.epoch == 1 and s.state.table.route(b"k") == 2


def test_ids_in_the_log_answer_resends_after_a_restart():
    s = fresh()
    s.remember([make_event(1, *routing_update({"k": 2}), request_id="old")])
    assert s.answer(update("old", {"k": 2}), 1).duplicate


def test_remembered_ids_are_bounded():
    s = fresh(limits=RequestLimits(remembered=2))
    for i in range(3):
        s.answer(update(f"r{i}", {f"k{i}": 1}), i)
    assert list(s.answered) == ["r1", "r2"]


def keyed_home(n: int) -> str:
    """A key whose hash home (over ``n`` workers) is not worker 3."""
    return next(k for k in (f"x{i}" for i in range(100)) if kafka_partition(k.encode(), n) != 3)


REFUSED = {
    "unknown-kind": Request("q", "t", "REPARTITION", {}, None, "io.ballast.ScaleRequest", 10),
    "kind-mismatch": Request("q", "t", "SCALE", {"target": "x"}, None, "io.ballast.SheddingRequest", 10),
    "too-large": Request("q", "t", "SCALE", {"num_workers": 2}, None, "io.ballast.ScaleRequest", 10**9),
    "stale-epoch": update("q", {"k": 1}, expected=7),
    "empty-update": update("q"),
    "invalid-key": update("q", {"": 1}),
    "assign-and-unassign": update("q", {"k": 1}, ["k"]),
    "worker-out-of-range": update("q", {"k": 4}),
    "workers-out-of-range": scale("q", 9),
    "keep-probability-out-of-range": shed("q", "in", 0.0),
    "empty-target": shed("q", "", 0.5),
}


@pytest.mark.parametrize("reason", sorted(REFUSED))
def test_each_refusal_has_its_reason_and_leaves_the_log_unchanged(reason):
    s = fresh()
    before = s.state
    got = s.answer(REFUSED[reason], 1)
    assert (got.accepted, got.reason, got.event, got.epoch) == (False, reason, None, 0)
    assert got.detail and s.state is before and "q" not in s.answered


def test_too_many_keys_in_one_update_are_refused():
    s = fresh(limits=RequestLimits(max_keys=2))
    assert s.answer(update("q", {"a": 1, "b": 1, "c": 1}), 1).reason == "too-large"


def test_a_scale_below_a_pinned_worker_is_refused():
    s = fresh()
    key = keyed_home(4)
    s.answer(update("r1", {key: 3}), 1)
    assert s.answer(scale("q", 2), 2).reason == "scale-leaves-pins"


def test_keys_of_a_migration_in_flight_are_refused_and_so_is_a_scale():
    s = fresh()
    s.in_flight = {"hot"}
    assert s.answer(update("q", {"hot": 1}), 1).reason == "migration-in-flight"
    assert s.answer(update("q2", {"cold": 1}), 1).accepted
    assert s.answer(scale("q3", 2), 1).reason == "migration-in-flight"


def test_a_request_that_waited_longer_than_its_time_to_live_is_refused():
    # the wait is measured on the broker's clock by the service (request_age.py); the sequencer
    # only compares it with the time to live
    s = fresh(request_ttl_ms=1000)
    old = Request("q", "t", "SCALE", {"num_workers": 2}, None, "io.ballast.ScaleRequest", 10, waited_ms=1001)
    assert s.answer(old, 2000).reason == "expired" and s.state.epoch == 0
    assert s.answer(Request("q2", "t", "SCALE", {"num_workers": 2}, None, "io.ballast.ScaleRequest", 10,
                            waited_ms=1000), 2000).accepted  # fmt: skip


@pytest.mark.parametrize("offset_ms", [-5 * 60_000, 5 * 60_000])
def test_the_senders_clock_does_not_decide_expiry(offset_ms):
    # a sender whose clock is 5 minutes behind (or ahead) stamps issued_at 5 minutes off; the
    # request waited 10 ms in the requests topic, so it is fresh (it used to be refused as expired)
    now = 1_700_000_000_000
    s = fresh(request_ttl_ms=60_000)
    r = Request("q", "t", "SCALE", {"num_workers": 2}, None, "io.ballast.ScaleRequest", 10,
                issued_at=now + offset_ms)  # fmt: skip
    assert s.answer(r, now).accepted


def test_a_request_whose_wait_is_unknown_never_expires():
    # no broker append time (a requests topic that keeps its writers' CreateTime), or no reading of
    # the broker's clock: the wait cannot be judged on one clock, so it does not refuse
    s = fresh(request_ttl_ms=1)
    r = Request("q", "t", "SCALE", {"num_workers": 2}, None, "io.ballast.ScaleRequest", 10, issued_at=0)
    assert s.answer(r, 10**13).accepted


def test_undecodable_bytes_are_answered_under_their_key():
    got = decode_request(b"\x00garbage", b"req-9", 5)
    assert (got.request_id, got.accepted, got.reason, got.epoch) == ("req-9", False, "malformed", 5)
    codec = AvroCodec("io.ballast.ControlRequest")
    value = codec.encode({
        "request_id": "", "issuer": "t", "issued_at": 1, "expected_epoch": None, "kind": "SCALE",
        "payload": ("io.ballast.ScaleRequest", {"num_workers": 2, "reason": ""}),
    })  # fmt: skip
    assert decode_request(value, None, 5).reason == "missing-request-id"
    ok = decode_request(value, b"from-key", 5)
    assert (ok.request_id, ok.kind, ok.body["num_workers"]) == ("from-key", "SCALE", 2)


def test_snapshots_come_every_n_epochs_and_reset_the_count():
    s = fresh(snapshot_every=3)
    for i in range(3):
        s.answer(update(f"r{i}", {f"k{i}": 1}), i)
    assert s.snapshot_due()
    snap = s.snapshot(9)
    assert (snap["type"], snap["epoch"], s.snapshot_due()) == ("TABLE_SNAPSHOT", 4, False)


def test_two_sequencers_fed_the_same_requests_write_the_same_log():
    requests = [update("a", {"k": 1}), scale("b", 6), update("c", {"j": 5}), shed("d", "*", 0.9)]
    one, two = fresh(), fresh()
    logs = [[one.answer(r, 7).event for r in requests], [two.answer(r, 7).event for r in requests]]
    assert logs[0] == logs[1]


def test_every_reason_is_described():
    assert all(REFUSALS.values())
