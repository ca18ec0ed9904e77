"""The reduce worker's follower of the control topic over a scripted topic (no broker): it folds
what it reads into its view and answers an epoch and a log end by offset. The path every task
takes first; a broker test (tests/integration/spark_jobs/test_control_log_startup.py) runs it on
a million-event log."""

from __future__ import annotations

import confluent_kafka

from ballast.control import state as cs
from ballast.control.genesis import genesis_snapshot
from ballast.kafka.configuration import KafkaConfig
from spark_jobs.reduce.ownership_log import OwnershipLog
from tests.support.scripted_log import ScriptedLog


def log_of(n: int) -> list[dict]:
    events = [cs.make_event(0, *genesis_snapshot(4), issued_at=0)]
    for e in range(1, n):
        events.append(cs.make_event(e, *cs.routing_update({f"k{e}": e % 4}), issued_at=0))
    return events


def test_the_follower_folds_to_an_epoch_and_knows_the_epoch_after_an_offset(monkeypatch) -> None:
    monkeypatch.setattr(confluent_kafka, "Consumer", ScriptedLog(log_of(20)))
    log = OwnershipLog(KafkaConfig.plaintext("scripted:1"), "c", 4)
    view = log.ensure(12, timeout=5.0)
    assert view.epoch >= 12
    assert view.owner("k7", 12) == 7 % 4 and view.run_start("k7", 12) == 7
    assert log.epoch_through(19, timeout=5.0) == 19
