"""A restarted controller rebuilds the migration its log left in flight; its gauges say what the
status record says.

Why: the log is the controller's only memory (kill -9 leaves nothing else), so what a restart does
with a half-sent migration is decided by :func:`resume_migration` alone: the steps the log shows
sent stay as they were (their epochs are what the workers will report installs for), the keys not
sent yet are split again, and a migration closed by DONE or ABORT is never resumed.
"""

from __future__ import annotations

from prometheus_client import generate_latest

from ballast.control.state import make_event, migration_step, routing_update
from ballast.metrics.records import ControllerStatus
from services.controller.pacing import PacingSettings, resume_migration
from services.controller.prometheus import ControllerGauges

PACING = PacingSettings("batched", max_keys=2)


def log_of(*bodies: tuple[str, dict]) -> list[dict]:
    return [make_event(epoch, kind, body, issuer="c1") for epoch, (kind, body) in enumerate(bodies, 1)]


def start(mid: str, keys: list[str]) -> tuple[str, dict]:
    return migration_step(mid, "START", keys, [0] * len(keys), [1] * len(keys))


def test_nothing_in_flight_when_every_migration_ended() -> None:
    events = log_of(
        start("m1", ["a"]),
        routing_update({"a": 1}, migration_id="m1"),
        migration_step("m1", "DONE", ["a"], [0], [1]),
        start("m2", ["b"]),
        migration_step("m2", "ABORT", ["b"], [0], [1]),
    )
    assert resume_migration(events, PACING) is None


def test_sent_steps_stay_and_the_rest_is_split_again() -> None:
    keys = ["a", "b", "c", "d", "e"]
    events = log_of(
        routing_update({"x": 2}),  # not the migration's
        start("m1", keys),
        routing_update({"a": 1, "b": 1}, migration_id="m1"),  # step 1, epoch 3
        routing_update({"z": 3}),  # another writer's update between the steps
        routing_update({"c": 1, "d": 1}, migration_id="m1"),  # step 2, epoch 5
    )
    resumed = resume_migration(events, PACING)
    assert resumed is not None
    migration, epochs = resumed
    assert migration.migration_id == "m1"
    assert epochs == [3, 5]
    assert [[m.key for m in step] for step in migration.steps] == [["a", "b"], ["c", "d"], ["e"]]
    assert migration.current == 1 and migration.epochs == {0: 3, 1: 5}
    assert migration.phase == "running"
    # the workers' installs of step 2 (at its epoch) release the last step, nothing else
    actions = migration.observe([("c", 5), ("d", 5)], now=migration.issued_at + 1)
    assert [type(a).__name__ for a in actions] == ["SendStep"]
    assert [m.key for m in actions[0].moves] == ["e"]


def test_a_migration_whose_first_step_was_not_sent_waits_to_send_it() -> None:
    events = log_of(start("m1", ["a", "b", "c"]))
    resumed = resume_migration(events, PACING)
    assert resumed is not None
    migration, epochs = resumed
    assert epochs == [] and migration.current == -1
    actions = migration.resume(now=0.0)
    assert [m.key for m in actions[0].moves] == ["a", "b"]


def test_gauges_show_the_status() -> None:
    gauges = ControllerGauges()
    status = ControllerStatus(
        controller="c1",
        epoch=42,
        table_size=7,
        workers=8,
        realized_imbalance=1.31,
        predicted_imbalance=1.05,
        worker_load=[1.0] * 8,
        migration_id="m1",
        migration_keys=3,
        migration_bytes=1024,
        requests_accepted=10,
        requests_refused={"stale-epoch": 2},
        decisions=1,
        last_decision="imbalance",
    )
    gauges.update(status)
    text = generate_latest(gauges.registry).decode()
    assert 'ballast_controller_epoch{controller_id="c1"} 42.0' in text
    assert 'ballast_controller_realized_imbalance{controller_id="c1"} 1.31' in text
    assert 'ballast_controller_requests_refused_total{controller_id="c1",reason="stale-epoch"} 2.0' in text
    assert 'ballast_controller_migration_bytes{controller_id="c1"} 1024.0' in text
