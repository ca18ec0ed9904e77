"""On a real broker: a lift refused as ``expired`` is asked again, so the shed does not stay.

The stream is shed to 0.5 (an operator's request), then the controller is stopped. The shedder,
started on a calm input, decides to lift and asks; the request waits in the requests topic longer
than the controller's time to live (4 s here). The controller, started again, refuses it as
``expired``; the shedder decides the same lift at its next cycles and sends it again under the same
id, and the controller applies it. The test checks its premise (the first answer really was
``expired``) and reads the whole log, the requests and the responses topics: the lift is applied
once, the id was sent twice, and nothing but the operator's shed and the lift is in the log.
"""

from __future__ import annotations

import itertools
import time
from collections import Counter

from ballast.avro.codec import AvroCodec
from ballast.control.requests import ControlClient
from ballast.kafka.reading import read_topic
from ballast.waiting import wait_until
from tests.support.shedder_kit import Feeder, StandIn, shedding_events

TTL_S = 4


def test_a_lift_refused_as_expired_after_a_controller_outage_is_asked_again_and_applied(pipe):
    topic = pipe.layout.name("input")
    controller = pipe.controller("c1", rebalance=False, request_ttl_s=TTL_S)
    pipe.start(controller)
    operator = ControlClient(pipe.kafka, pipe.layout, "operator")
    try:
        shed = operator.request("SHEDDING", {"target": topic, "keep_probability": 0.5, "reason": "test"},
                                timeout=30)  # fmt: skip
    finally:
        operator.close()
    assert shed.accepted, shed
    assert pipe.stop("controller-c1") == 0  # the outage begins

    stand_in = StandIn(pipe, [topic], capacity=3000)  # keeps up: a calm input
    stand_in.start()
    feeder = Feeder(pipe.kafka, {topic: 300})
    feeder.start()
    declaration = f"topic={topic},target=10s,priority=0,min-accuracy=0.2"
    settings = {"cycle_s": 1, "sample_s": 0.25, "rate_tau_s": 2, "log_level": "info", "resend_max_s": 4}
    try:
        pipe.start(pipe.shedder(declaration, **settings))
        wait_until(lambda: "asked" in pipe.log("shedder"), 90, "the shedder asks to lift the shed")
        time.sleep(TTL_S + 4)  # the lift waits in the requests topic past its time to live
        pipe.start(controller)  # the outage ends
        wait_until(lambda: len(shedding_events(pipe)) >= 2, 60, "the lift is applied")
        time.sleep(3)  # a few more cycles: nothing more is sent once the lift is in force
        pipe.check_running("shedder")
        code = pipe.stop("shedder")
    finally:
        feeder.stop.set()
        stand_in.stop.set()
        feeder.join(30)
        stand_in.join(30)
    assert code == 0, pipe.log_tail("shedder")
    assert stand_in.error is None

    sheds = shedding_events(pipe)  # the whole log from its genesis
    assert sheds[0]["request_id"] == shed.request_id, sheds
    lift = sheds[1]
    keeps = [e["payload"][1]["keep_probability"] for e in sheds]
    assert all(e["payload"][1]["target"] == topic for e in sheds)
    assert keeps[0] == 0.5 and all(a < b for a, b in itertools.pairwise(keeps)), keeps  # lifts only
    assert len({e["request_id"] for e in sheds}) == len(sheds)  # each id applied once

    requests = AvroCodec("io.ballast.ControlRequest")
    queued = read_topic(pipe.kafka, pipe.layout.name("requests"), idle=2.0, timeout=60)
    asked = [requests.decode(m.value()) for m in queued]
    mine = Counter(r["request_id"] for r in asked if r["issuer"] != "operator" and r["kind"] == "SHEDDING")
    # the first lift: asked, refused, asked again; any later lift once
    assert mine == Counter({e["request_id"]: 1 for e in sheds[2:]}) + Counter({lift["request_id"]: 2}), mine
    responses = AvroCodec("io.ballast.ControlResponse")
    answered = read_topic(pipe.kafka, pipe.layout.name("responses"), idle=2.0, timeout=60)
    answers = [responses.decode(m.value()) for m in answered]
    answers = [a for a in answers if a["request_id"] == lift["request_id"]]
    assert [(a["accepted"], a["reason"], a["duplicate"]) for a in answers] == [
        (False, "expired", False),  # the premise: the outage outlasted the time to live
        (True, "", False),
    ], answers
    assert answers[1]["epoch"] == lift["epoch"]
    assert "asking again" in pipe.log("shedder")
