"""A refused SHEDDING request is decided again and sent again, under its id, with a backoff.

The controller here is the real :class:`~services.controller.sequencer.Sequencer` behind an in-memory
requests and responses topic. Its expiry is played by the fake itself (a controller that comes back
after longer than the time to live refuses what waited meanwhile as ``expired``), so the test says
nothing about how the controller ages a request, only what the shedder does with a refusal. The
ground truth is the fake's own record of what was sent and what the log holds, not the shedder's
counters.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import pytest

from ballast.control.requests import Response
from ballast.control.state import StateBuilder, initial_state
from ballast.kafka.configuration import KafkaConfig
from ballast.kafka.topics import TopicLayout
from services.controller.sequencer import Request, Sequencer, refuse
from services.shedder.config import PolicySettings, ShedderSettings, StreamDeclaration
from services.shedder.policy import Observation
from services.shedder.service import Shedder
from tests.support.engine_rows import genesis, shedding

TOPIC = "ballast.input"


class FakeController:
    """The requests topic, the controller and the responses topic of one deployment, in memory; it
    answers what is queued whenever the shedder waits for answers, unless it is ``down``."""

    def __init__(self, state: Any) -> None:
        self.sequencer = Sequencer(state, "c1")
        self.queue: list[tuple[Request, bool]] = []  # (request, it waited past its time to live)
        self.responses: dict[str, Response] = {}
        self.sent: list[str] = []
        self.events: list[dict[str, Any]] = []  # the log after the shed, as the controller wrote it
        self.read = 0  # events the shedder's log reader has seen
        self.down = False
        self.refuse_next: list[str] = []  # reasons to refuse the next answers with, in order

    # the ControlClient's face
    def send(self, kind: str, body: Mapping[str, Any], request_id: str) -> str:
        self.sent.append(request_id)
        self.responses.pop(request_id, None)  # a resend waits for its own answer
        request = Request(request_id, "shedder", kind, dict(body), record="io.ballast.SheddingRequest")
        self.queue.append((request, False))
        return request_id

    def wait(self, request_ids: list[str], timeout: float) -> dict[str, Response]:
        if not self.down:
            self._serve()
        return {rid: self.responses[rid] for rid in request_ids if rid in self.responses}

    # the control log's reader's face
    def new_events(self) -> list[dict[str, Any]]:
        out, self.read = self.events[self.read :], len(self.events)
        return out

    # the test's levers
    def stay_down_past_the_ttl(self) -> None:
        """Everything queued now waits longer than the controller's time to live."""
        self.queue = [(r, True) for r, _ in self.queue]

    def _serve(self) -> None:
        for request, expired in self.queue:
            epoch = self.sequencer.state.epoch
            if expired:
                answer = refuse(request.request_id, epoch, "expired", "waited past its time to live")
            elif self.refuse_next:
                answer = refuse(request.request_id, epoch, self.refuse_next.pop(0))
            else:
                answer = self.sequencer.answer(request, now_ms=0)
            if answer.event is not None:
                self.events.append(answer.event)
            a = answer
            self.responses[request.request_id] = Response(
                a.request_id, a.accepted, a.epoch, a.reason, a.detail, a.duplicate
            )
        self.queue = []


def shed_in_force() -> tuple[Shedder, FakeController]:
    """A shedder whose stream is shed to 0.5 (the log's epoch 1), and its controller."""
    log = [genesis(4), shedding(1, TOPIC, 0.5)]
    builder = StateBuilder(initial_state(4))
    for e in log:
        builder.apply(e)
    s = Shedder(
        KafkaConfig.plaintext("127.0.0.1:1", "test"),
        TopicLayout(prefix="ballast"),
        ShedderSettings(resend_max_s=20.0),
        PolicySettings(cycle_s=5.0),
        [StreamDeclaration(TOPIC, 30.0, 0, 0.2)],
    )
    s.keeps.apply(log)
    controller = FakeController(builder.state())
    s.client = controller  # type: ignore[assignment]
    return s, controller


def calm_cycle(s: Shedder, controller: FakeController, fold: bool = True) -> None:
    """One cycle of a calm stream: the log folded (as the cycle's reader does; ``fold=False``: the
    reader has not seen the newest events yet), the policy asked, its changes sent, the answers read."""
    if fold:
        s.keeps.apply(controller.new_events())
    s.cycles += 1
    keep = s.keeps.keep_for(TOPIC)
    decision = s.policy.decide({TOPIC: Observation(keep, 0.2, "flat", 100.0)}, 50.0, 5.0, 1000.0)
    s.send_changes(decision)


def test_a_lift_refused_as_expired_is_sent_again_and_applied(caplog):
    caplog.set_level(logging.INFO, "services.shedder")
    s, controller = shed_in_force()
    controller.down = True
    calm_cycle(s, controller)  # the lift is asked while the controller is down: queued
    lift = controller.sent[0]
    assert lift.endswith("@1->1.000")
    controller.stay_down_past_the_ttl()
    controller.down = False
    calm_cycle(s, controller)  # the controller is back: the queued lift is refused as expired
    assert controller.responses[lift].reason == "expired" and controller.events == []
    for _ in range(3):
        calm_cycle(s, controller)
    # decided again, sent again under the same id (the controller never remembers a refusal), applied
    assert controller.sent == [lift, lift]
    assert [e["request_id"] for e in controller.events] == [lift]
    assert controller.sequencer.state.keep_for(TOPIC) == 1.0
    assert s.keeps.keep_for(TOPIC) == 1.0  # in force, so later cycles decide no change and send nothing
    assert s.answers == {"refused": 1, "accepted": 1} and s.resent == 1
    assert any("asking again" in r.getMessage() and lift in r.getMessage() for r in caplog.records)


def test_a_request_refused_again_and_again_waits_twice_as_long_each_time_up_to_the_cap():
    s, controller = shed_in_force()
    controller.refuse_next = ["invalid"] * 8
    sent_at: list[int] = []
    for cycle in range(1, 41):
        before = len(controller.sent)
        calm_cycle(s, controller)
        if len(controller.sent) > before:
            sent_at.append(cycle)
    # sent at cycle 1 and refused; then again 1, 2, 4 cycles after each refusal, then every 4 cycles
    # (resend_max_s 20 s at 5 s cycles); the ninth send is accepted and nothing more is sent
    assert sent_at == [1, 2, 4, 8, 12, 16, 20, 24, 28]
    assert len(set(controller.sent)) == 1 and controller.sequencer.state.keep_for(TOPIC) == 1.0
    assert s.answers == {"refused": 8, "accepted": 1} and s.resent == 8


def test_an_accepted_or_queued_request_is_not_sent_again():
    s, controller = shed_in_force()
    controller.down = True
    for _ in range(4):
        calm_cycle(s, controller)  # queued: the controller answers it when it is back
    assert len(controller.sent) == 1
    controller.down = False
    calm_cycle(s, controller)
    calm_cycle(s, controller, fold=False)  # the event is not folded yet: the cycle decides the same lift
    assert s.keeps.keep_for(TOPIC) == 0.5
    assert len(controller.sent) == 1 and s.answers == {"accepted": 1}


@pytest.mark.parametrize(("cycle_s", "max_s", "cycles"), [(5.0, 60.0, 12), (5.0, 1.0, 1), (2.0, 5.0, 3)])
def test_the_longest_wait_is_resend_max_s_in_whole_cycles(cycle_s, max_s, cycles):
    from services.shedder.outbox import max_wait_cycles

    assert max_wait_cycles(max_s, cycle_s) == cycles
