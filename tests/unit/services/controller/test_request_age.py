"""A request's wait is told on the broker's clock alone: its append time against a probe's.

The broker's clock here is a script the test owns (``Broker``): its time is set apart from the
controller's and from every sender's on purpose, so a result that leaned on either would be off by
minutes. The expected waits are worked out from the script.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME

from ballast.avro.codec import AvroCodec
from ballast.control.requests import RECORDS
from ballast.control.state import initial_state
from services.controller.config import ControllerSettings
from services.controller.request_age import (
    PROBE_KIND,
    BrokerClock,
    RequestAges,
    append_time_ms,
    waits_ms,
)
from services.controller.sequencer import RequestLimits, Sequencer
from services.controller.service import Controller, Tallies

pytestmark = pytest.mark.unit

BROKER_EPOCH_MS = 1_900_000_000_000  # the broker's calendar; nobody else's clock is near it


class Broker:
    """The requests partition's leader: its clock runs on the test's fake monotonic time ``t``."""

    def __init__(self) -> None:
        self.t = 100.0  # our monotonic seconds
        self.offset_ms = 0  # a step of the broker's clock (NTP)
        self.rtt_s = 0.0  # a probe's round trip: stamped halfway, acknowledged at the end
        self.probes = 0
        self.answer_probes = True

    def now_ms(self) -> int:
        return BROKER_EPOCH_MS + round(self.t * 1000) + self.offset_ms

    def probe(self) -> int | None:
        self.probes += 1
        self.t += self.rtt_s / 2
        stamp = self.now_ms()
        self.t += self.rtt_s / 2
        return stamp if self.answer_probes else None

    def ages(self, ttl_s: float = 60.0, on_unaged=lambda: None) -> RequestAges:
        return RequestAges(int(ttl_s * 1000), self.probe, on_unaged, monotonic=lambda: self.t)


def test_waits_are_the_append_times_against_a_probe_of_the_same_broker():
    broker = Broker()
    ages = broker.ages()
    now = broker.now_ms()
    assert ages.waits([now - 61_000, now - 59_000, now + 5]) == [61_000, 59_000, 0]
    assert broker.probes == 1
    broker.t += 30.0  # thirty seconds later on our monotonic clock: the reading is carried forward
    now = broker.now_ms()
    assert ages.waits([now - 1_000]) == [1_000] and broker.probes == 1  # nothing refused: no new probe


def test_the_probes_round_trip_never_makes_a_wait_look_longer():
    broker = Broker()
    broker.rtt_s = 0.4
    ages = broker.ages()
    appended = broker.now_ms() - 10_000
    waited = ages.waits([appended])[0]
    truth = broker.now_ms() - appended  # at the acknowledgement
    assert waited is not None and truth - 400 <= waited <= truth


def test_a_broker_clock_stepped_back_is_read_again_before_it_refuses_anyone():
    broker = Broker()
    ages = broker.ages()
    ages.waits([broker.now_ms()])
    broker.t += 5.0
    broker.offset_ms = -120_000  # the broker's clock is set back two minutes
    fresh = broker.now_ms() - 1_000
    # against the old reading this request waited 121 s; a probe of this batch says 1 s
    assert ages.waits([fresh]) == [1_000] and broker.probes == 2


def test_without_a_reading_of_the_brokers_clock_nothing_expires():
    broker = Broker()
    broker.answer_probes = False  # a topic stamping CreateTime, or a probe that failed
    ages = broker.ages()
    assert ages.waits([broker.now_ms() - 3_600_000]) == [None]
    ages = Broker().ages()
    ages.clock.read(BROKER_EPOCH_MS, 0.0, batch=0)  # an old reading that would refuse
    ages.probe = lambda: None
    assert ages.waits([BROKER_EPOCH_MS - 3_600_000]) == [None]  # stale: refuses nobody


def test_records_without_an_append_time_are_not_aged_and_that_is_said_once():
    said = []
    broker = Broker()
    ages = broker.ages(on_unaged=lambda: said.append(1))
    assert ages.waits([None, None]) == [None, None] and ages.waits([None]) == [None]
    assert said == [1] and broker.probes == 0
    assert Broker().ages(ttl_s=0).waits([5]) == [None]  # no time to live: nothing to judge


def test_only_a_log_append_time_is_an_append_time():
    assert append_time_ms((TIMESTAMP_LOG_APPEND_TIME, 42)) == 42
    assert append_time_ms((TIMESTAMP_CREATE_TIME, 42)) is None  # the writer's clock
    assert append_time_ms((TIMESTAMP_LOG_APPEND_TIME, -1)) is None
    assert waits_ms([10, None], None) == [None, None]
    clock = BrokerClock()
    assert clock.now_ms(5.0) is None
    clock.read(None, 1.0, 0)
    assert clock.stamp_ms is None


# --- the controller's pass: the waits decide, the senders' clocks do not ------------------------------


class Message:
    def __init__(self, key: bytes, value: bytes, appended_ms: int | None) -> None:
        self._key, self._value = key, value
        stamped = appended_ms is not None
        self._ts = (TIMESTAMP_LOG_APPEND_TIME, appended_ms) if stamped else (TIMESTAMP_CREATE_TIME, 1)

    def key(self) -> bytes:
        return self._key

    def value(self) -> bytes:
        return self._value

    def timestamp(self) -> tuple[int, int]:
        return self._ts


class FakeLink:
    def __init__(self, broker: Broker, messages: list[Message]) -> None:
        self.broker, self.messages = broker, messages
        self.responses: list[dict[str, Any]] = []
        self.consumed_keys: list[bytes] = []
        self.events: list[dict[str, Any]] = []

    def poll(self, _max: int, _timeout: float) -> list[Message]:
        out, self.messages = self.messages, []
        return out

    def probe_clock(self) -> int | None:
        return self.broker.probe()

    def begin(self) -> None:
        pass

    def append(self, events) -> None:
        self.events.extend(events)

    def respond(self, response: dict[str, Any]) -> None:
        self.responses.append(response)

    def consumed(self, message: Message) -> None:
        self.consumed_keys.append(message.key())

    def commit(self) -> None:
        pass


def request(rid: str, issued_at: int, appended_ms: int | None, kind: str = "SHEDDING") -> Message:
    body = {"target": rid, "keep_probability": 0.5, "reason": "", "seed": None}
    payload = (RECORDS["SHEDDING"], body) if kind == "SHEDDING" else (RECORDS["REBALANCE"], {"dry_run": True})
    record = {"request_id": rid, "issuer": "t", "issued_at": issued_at, "expected_epoch": None}
    value = AvroCodec("io.ballast.ControlRequest").encode({**record, "kind": kind, "payload": payload})
    return Message(rid.encode(), value, appended_ms)


def controller(link: FakeLink, broker: Broker) -> Controller:
    c = object.__new__(Controller)
    c.settings = ControllerSettings(request_ttl_s=60)
    c.id = "c1"
    c.tallies = Tallies()
    c.migration = None
    c.link = link  # type: ignore[assignment]
    c.audit = None  # no log followed: nothing foreign to look for
    c.sequencer = Sequencer(initial_state(4), "c1", RequestLimits(), request_ttl_ms=60_000)
    c._pending_events = []
    c._ages = broker.ages(60.0)
    return c


def test_the_controller_refuses_by_the_brokers_clock_whatever_the_senders_say():
    broker = Broker()
    now = broker.now_ms()
    ours = int(time.time() * 1000)
    link = FakeLink(
        broker,
        [
            request("late", ours, now - 61_000),  # stamped "now" by a sender, but it waited 61 s
            request("behind", ours - 5 * 60_000, now - 2_000),  # a sender 5 minutes behind, 2 s ago
            request("probe", ours, now - 500, kind=PROBE_KIND),  # an earlier controller's clock probe
            request("ahead", ours + 5 * 60_000, now - 1_000),  # a sender 5 minutes ahead
        ],
    )
    c = controller(link, broker)
    c._answer_requests()
    answers = {r["request_id"]: (r["accepted"], r["reason"]) for r in link.responses}
    assert answers == {"late": (False, "expired"), "behind": (True, ""), "ahead": (True, "")}
    assert [e["request_id"] for e in link.events] == ["behind", "ahead"]
    assert len(link.consumed_keys) == 4  # the probe is consumed too, unanswered
    assert broker.probes == 1  # read once for the batch, and the refusal stands on that reading
