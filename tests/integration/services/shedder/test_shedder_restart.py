"""Acceptance 7 on a real broker: the shedder survives kill -9 and a malformed metrics record.

The crash is placed where a duplicate could arise: the controller is paused (SIGSTOP), so the
shedder's first SHEDDING request waits unanswered in the requests topic when the shedder is killed.
The restarted shedder folds the same log, decides the same first step (1 -> 0.5: any goal at or
below half is one bounded step away) and sends it again. The whole control log is then read: every
request id at most once, and no SHEDDING event that sets the value already in force (what a resend
under a new id would leave). The resend itself is checked to have happened (two requests with the
same id, the second answered as a duplicate), so the test fails if the crash missed its moment.
"""

from __future__ import annotations

import signal
import time
from collections import Counter

from ballast.avro.codec import AvroCodec
from ballast.kafka.clients import make_producer
from ballast.kafka.follow import TopicFollower
from ballast.metrics.records import LagSample
from ballast.waiting import wait_until
from tests.support.shedder_kit import Feeder, StandIn, control_events


def every_record(pipe, topic: str) -> list:
    """Every record of ``topic`` up to its end as of the call. Not "until a quiet spell": the
    controller still publishes its status on the metrics topic, so one may be long in coming."""
    with TopicFollower(pipe.kafka, pipe.layout.name(topic)) as follower:
        return follower.read_to_end(60)


def test_kill9_and_restart_send_no_duplicate_setting_and_a_bad_metrics_record_is_skipped(pipe):
    topic = pipe.layout.name("input")
    pipe.start(pipe.controller("c1", rebalance=False))
    stand_in = StandIn(pipe, [topic], capacity=3000)  # keeps up at first: the rates settle
    stand_in.start()
    feeder = Feeder(pipe.kafka, {topic: 600})
    feeder.start()
    declaration = f"topic={topic},target=3s,priority=0,min-accuracy=0.2"
    settings = {
        "cycle_s": 1,
        "sample_s": 0.25,
        "rate_tau_s": 2,
        "log_level": "info",
        "metrics_from": "earliest",
    }
    pipe.start(pipe.shedder(declaration, **settings))
    # a malformed record on the metrics topic: skipped, counted, the shedder goes on
    bad = make_producer(pipe.kafka.with_client_id("bad-metrics"))
    bad.produce(pipe.layout.name("metrics"), value=b"\x00 not a MetricsRecord")
    bad.flush(30)
    wait_until(lambda: "undecodable metrics record" in pipe.log("shedder"), 30, "the bad record is logged")
    time.sleep(8)  # four time constants of the rates at 600/s, kept up with
    assert "asked" not in pipe.log("shedder")
    pipe.signal("controller-c1", signal.SIGSTOP)
    # a 10x overload from now on: any plan is at most half, one step from 1, even with the feeder at half
    # its rate on a loaded machine (at 4x, CI measured a goal of 0.504: the step did not bind)
    stand_in.capacity = 60
    try:
        wait_until(lambda: "asked" in pipe.log("shedder"), 90, "the shedder asks for a shed")
        first_log = pipe.log("shedder")
        pipe.kill("shedder")  # SIGKILL: the request is queued, unanswered
        pipe.start(pipe.shedder(declaration, **settings))
        wait_until(lambda: "asked" in pipe.log("shedder").replace(first_log, "", 1), 90,
                   "the restarted shedder decides again")  # fmt: skip
        pipe.signal("controller-c1", signal.SIGCONT)
        wait_until(lambda: len([e for e in control_events(pipe) if e["type"] == "SHEDDING"]) >= 2, 90,
                   "the controller applies the sheds")  # fmt: skip
        time.sleep(5)  # a few more cycles of the restarted shedder
        pipe.check_running("shedder")
        code = pipe.stop("shedder")
    finally:
        feeder.stop.set()
        stand_in.stop.set()
        feeder.join(30)
        stand_in.join(30)
        pipe.signal("controller-c1", signal.SIGCONT)
    assert code == 0, pipe.log_tail("shedder")
    assert stand_in.error is None

    events = control_events(pipe)  # the whole log, from the genesis
    sheds = [e for e in events if e["type"] == "SHEDDING"]
    ids = Counter(e["request_id"] for e in sheds)
    assert sheds and all(n == 1 for n in ids.values()), ids
    keep = {}
    for e in sheds:
        body = e["payload"][1]
        before = keep.get(body["target"], 1.0)
        assert body["keep_probability"] != before, f"epoch {e['epoch']} sets {before} again"
        assert body["keep_probability"] >= 0.2  # never below the minimum accuracy
        keep[body["target"]] = body["keep_probability"]
    assert sheds[0]["payload"][1]["keep_probability"] == 0.5

    # the resend happened: the first request's id was sent twice and answered once as a duplicate
    first_id = sheds[0]["request_id"]
    requests = AvroCodec("io.ballast.ControlRequest")
    sent = [
        requests.decode(m.value())["request_id"]
        for m in every_record(pipe, "requests")
    ]
    assert sent.count(first_id) == 2, Counter(sent)
    responses = AvroCodec("io.ballast.ControlResponse")
    answers = [
        responses.decode(m.value())
        for m in every_record(pipe, "responses")
    ]
    mine = [a for a in answers if a["request_id"] == first_id]
    assert [a["duplicate"] for a in mine] == [False, True] and mine[0]["epoch"] == mine[1]["epoch"]

    # the restarted shedder went on measuring: LagSamples after the bad record, from both lives
    codec = AvroCodec("io.ballast.MetricsRecord")
    samples = []
    for m in every_record(pipe, "metrics"):
        try:
            record = codec.decode(m.value())
        except Exception:
            continue
        if record["body"][0].endswith("LagSample"):
            samples.append(LagSample.of(record["body"][1]))
    assert samples and {s.stage for s in samples} == {"router"}
    assert "1 undecodable metrics records" in pipe.log("shedder") or "undecodable" in pipe.log("shedder")
