"""A rebalance asked for by request writes its migration's first events in their epochs' place.

Why: the controller answers a batch of requests in one transaction, and a ``REBALANCE`` that
starts a migration gives its START and first step the next epochs. Those events used to wait for
the pass's own flush, after the request transaction, while a request answered later in the same
batch took the epoch after them and was committed first: the log held epoch e+3 before e+1, a gap
every reader refuses (routers stop). The transaction must hold the events in epoch order.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest
from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME

from ballast.avro.codec import AvroCodec
from ballast.control.requests import RECORDS
from ballast.control.state import initial_state
from ballast.metrics.records import HeavyHitter, RouterKeyStats
from ballast.planner.forecast import LoadForecaster
from ballast.routing.murmur2 import kafka_partition
from services.controller.config import ControllerSettings
from services.controller.interval_load import fold_interval
from services.controller.pacing import PacingSettings
from services.controller.request_age import RequestAges
from services.controller.sequencer import RequestLimits, Sequencer
from services.controller.service import Controller, Tallies

pytestmark = pytest.mark.unit

WORKERS = 8


class Message:
    def __init__(self, key: bytes, value: bytes) -> None:
        self._key, self._value = key, value

    def key(self) -> bytes:
        return self._key

    def value(self) -> bytes:
        return self._value

    def timestamp(self) -> tuple[int, int]:
        return (TIMESTAMP_LOG_APPEND_TIME, int(time.time() * 1000))  # just appended


class FakeLink:
    """The transport's face: what each transaction appended, in order."""

    def __init__(self, messages: list[Message]) -> None:
        self.messages = messages
        self.transactions: list[list[dict[str, Any]]] = []
        self.responses: list[dict[str, Any]] = []
        self.open: list[dict[str, Any]] | None = None

    def poll(self, _max: int, _timeout: float) -> list[Message]:
        out, self.messages = self.messages, []
        return out

    def begin(self) -> None:
        self.open = []

    def append(self, events) -> None:
        assert self.open is not None, "append outside a transaction"
        self.open.extend(events)

    def respond(self, response: dict[str, Any]) -> None:
        self.responses.append(response)

    def consumed(self, _message: Message) -> None:
        pass

    def commit(self) -> None:
        assert self.open is not None
        self.transactions.append(self.open)
        self.open = None


def request(kind: str, body: dict[str, Any], rid: str) -> Message:
    value = AvroCodec("io.ballast.ControlRequest").encode(
        {
            "request_id": rid,
            "issuer": "test",
            "issued_at": int(time.time() * 1000),
            "expected_epoch": None,
            "kind": kind,
            "payload": (RECORDS[kind], body),
        }
    )
    return Message(rid.encode(), value)


def controller(link: FakeLink) -> Controller:
    """A controller with the fake link and one interval folded in which worker 0 holds six heavy keys."""
    c = object.__new__(Controller)
    c.settings = ControllerSettings(forecast=False)
    c.id = "c1"
    c.pacing = PacingSettings("batched", max_keys=2)
    c.forecaster = LoadForecaster()
    c.tallies = Tallies()
    c.migration = None
    c.link = link  # type: ignore[assignment]
    c.audit = None  # no log followed: nothing foreign to look for
    c.sequencer = Sequencer(initial_state(WORKERS), "c1", RequestLimits())
    c._pending_events = []
    c._installs = []
    c._ages = RequestAges(60_000, lambda: int(time.time() * 1000))  # the broker's clock: ours, here
    hot = [k for k in (f"key-{i}" for i in range(1000)) if kafka_partition(k.encode(), WORKERS) == 0][:6]
    stats = RouterKeyStats(
        epoch=0,
        worker_records=[600] + [100] * (WORKERS - 1),
        worker_bytes=[0] * WORKERS,
        offered_records=1300,
        kept_records=1300,
        heavy_hitters=[HeavyHitter(k, 100, 0) for k in hot],
        sketch_capacity=1000,
    )
    load = fold_interval([stats], [], c.sequencer.state.table.route, WORKERS)
    assert load.imbalance > 3 and np.isclose(load.key_load.sum(), 600)
    c._last = (load, [])
    return c


def test_a_rebalance_and_a_later_request_of_one_batch_are_written_in_epoch_order():
    link = FakeLink(
        [
            request("REBALANCE", {"dry_run": False}, "r1"),
            request("ROUTING_UPDATE", {"assign": {"other": 3}, "unassign": [], "reason": ""}, "r2"),
        ]
    )
    c = controller(link)
    c._answer_requests()
    c._flush_own_events()
    assert c.migration is not None and len(c.migration.steps) >= 2  # a migration was started
    written = [e for t in link.transactions for e in t]
    epochs = [int(e["epoch"]) for e in written]
    assert epochs == list(range(1, len(epochs) + 1)), epochs  # dense, in order: no reader sees a gap
    kinds = [
        (e["type"], e["payload"][1].get("phase") or e["payload"][1].get("migration_id")) for e in written
    ]
    assert kinds[0] == ("MIGRATION_STEP", "START") and kinds[1][0] == "ROUTING_UPDATE"
    assert written[-1]["request_id"] == "r2"
    assert [r["accepted"] for r in link.responses] == [True, True]
    # the migration's first events went out with the request that asked for it
    assert len(link.transactions) == 1


def test_a_rebalance_alone_writes_its_start_and_first_step_with_its_answer():
    link = FakeLink([request("REBALANCE", {"dry_run": False}, "r1")])
    c = controller(link)
    c._answer_requests()
    assert [e["type"] for e in link.transactions[0]] == ["MIGRATION_STEP", "ROUTING_UPDATE"]
    c._flush_own_events()
    assert len(link.transactions) == 1  # nothing left for the pass's own flush
