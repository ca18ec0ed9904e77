"""On a real broker: a shedder whose clock is 5 minutes behind gets its sheds applied.

The controller used to judge a request's age as its own clock minus the sender's ``issued_at``, so a
shedder a minute behind had every request refused as ``expired`` (60 s time to live). Here the
shedder (the service object, driven cycle by cycle as its faust timers drive it) runs with a wall
clock 5 minutes behind the machine's, against the controller as a process and a consumer standing
in for the routers with a quarter of the input's rate as capacity. The test checks its premise
(the request really carried an ``issued_at`` 5 minutes behind the broker's append time) and reads
the log: the shed is there, under the shedder's id, and nothing was refused.
"""

from __future__ import annotations

import time

from ballast.avro.codec import AvroCodec
from ballast.kafka.reading import read_topic
from ballast.waiting import wait_until
from services.shedder.config import PolicySettings, ShedderSettings, StreamDeclaration
from services.shedder.service import Shedder
from tests.support.shedder_kit import Feeder, StandIn, shedding_events

OFFSET_S = -300.0


def test_a_shedder_with_its_clock_5_minutes_behind_gets_its_shed_applied(pipe):
    topic = pipe.layout.name("input")
    pipe.start(pipe.controller("c1", rebalance=False))  # the default time to live: 60 s
    stand_in = StandIn(pipe, [topic], capacity=150)  # a 4x overload of 600/s
    stand_in.start()
    feeder = Feeder(pipe.kafka, {topic: 600})
    feeder.start()
    shedder = Shedder(
        pipe.kafka,
        pipe.layout,
        ShedderSettings(rate_tau_s=2, publish_lag=False),
        PolicySettings(cycle_s=1.0),
        [StreamDeclaration(topic, 3.0, 0, 0.2)],
        wall_clock=lambda: time.time() + OFFSET_S,
    )
    try:
        shedder.connect(timeout=30)
        next_cycle = time.monotonic() + 1.0

        def answered() -> bool:
            nonlocal next_cycle
            shedder.sample()
            if time.monotonic() >= next_cycle:
                next_cycle += 1.0
                shedder.cycle()
            time.sleep(0.25)
            return sum(shedder.answers.values()) > 0

        wait_until(answered, 90, "the shedder asks for a shed and gets an answer")
    finally:
        shedder.close()
        feeder.stop.set()
        stand_in.stop.set()
        feeder.join(30)
        stand_in.join(30)
    assert stand_in.error is None
    sheds = shedding_events(pipe)
    assert sheds and all(e["request_id"].startswith(f"{shedder.id}:{topic}@") for e in sheds), sheds
    assert sheds[0]["payload"][1]["keep_probability"] == 0.5  # the first step from 1
    assert shedder.answers == {"accepted": len(sheds)}, shedder.answers  # nothing refused

    # the premise: the request was stamped by a clock 5 minutes behind the broker's
    requests = AvroCodec("io.ballast.ControlRequest")
    sent = [
        (requests.decode(m.value()), m.timestamp()[1])
        for m in read_topic(pipe.kafka, pipe.layout.name("requests"), idle=2.0, timeout=60)
    ]
    mine = [(r, appended) for r, appended in sent if r["issuer"] == shedder.id]
    assert [r["request_id"] for r, _ in mine] == [e["request_id"] for e in sheds]  # each sent once
    for request, appended_ms in mine:
        assert abs((request["issued_at"] - appended_ms) / 1000 - OFFSET_S) < 10, (request, appended_ms)
