"""The pipeline on a secured cluster (issue 28, acceptance 1 and 3; docs/security.md).

One live run on a stack started as ``ballast stack up --secure`` starts it (SASL_SSL, SCRAM-SHA-512,
the StandardAuthorizer with no access without an ACL): the controller, two routers, the Spark
reduce and the shedder, each as its own principal with only the least-privilege ACLs
(``ballast acls apply``), the control log signed. A routing update through the controller moves
hot keys mid-stream, so the reduce ships state chunks through the routed topic under its ACLs too.

Then, with everything running, each forbidden act fails with an authorization error and changes
nothing: a router or the shedder writing the control log, the shedder writing routed records, a
client without credentials (or with a wrong password) reading anything, the reduce committing the
routers' group. Every service still runs (``ballast status``), and no log of the run holds any
password.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from ballast.control.requests import ControlClient
from ballast.deployment.acls import Principals
from ballast.deployment.create import grant_deployment
from ballast.devstack.security import service_configs, stack_admin, stack_connection
from ballast.kafka.configuration import KafkaConfig
from ballast.kafka.identities import router_group
from ballast.kafka.reading import records_written
from ballast.settings import Secret
from ballast.workload import FLUSH_KEY, key_name
from tests.support import reduce_reference
from tests.support.output_judge import assert_rows_right, judge
from tests.support.reduce_kit import WORKERS, ReduceKit, reduce_events

EVENTS = 40_000
RATE = 4_000
AGG = "aggregate:size=4s,slide=2s"
JOB_ARGS = ("--watermark-delay", "10 seconds", "--max-offsets-per-trigger", "20000")
STREAM = "target=60s,priority=1,min-accuracy=0.5"


@pytest.fixture(scope="module")
def secured_run(secure_stack, tmp_path_factory) -> Any:
    state = secure_stack
    workdir = tmp_path_factory.mktemp("secured")
    admin = stack_admin(state, "secured-tests")
    kit = ReduceKit(
        admin,
        f"sec-{workdir.name}",
        workdir,
        service_kafka=service_configs(state, "secured-tests"),
        signing_key=workdir / "control.pem",
    )
    created, _present = grant_deployment(admin, kit.layout, Principals())
    events = reduce_events(EVENTS, seed=41)
    client = ControlClient(admin, kit.layout, "secured-test")
    run: dict[str, Any] = {"kit": kit, "state": state, "events": events, "acls_created": created}
    try:
        kit.pipe.start(kit.pipe.controller("c1", rebalance=False))
        for rid in ("r1", "r2"):
            kit.start_router(rid)
        kit.start_job("agg", AGG, *JOB_ARGS)
        kit.pipe.start(kit.pipe.shedder(f"topic={kit.input},{STREAM}", cycle_s=2, dry_run=True))
        kit.pipe.wait_ready(kit.jobs["agg"], 300)
        half = EVENTS // 2
        kit.produce(events[:half], RATE)
        hot = {key_name(r): (kit.current_owner(key_name(r)) + 1) % WORKERS for r in range(5)}
        answer = client.request("ROUTING_UPDATE", {"assign": hot}, timeout=60)
        assert answer.accepted, answer
        run["epoch"] = answer.epoch
        kit.produce(events[half:], RATE)
        kit.flush_after(EVENTS, events[-1]["event_time"])
        run["every"] = reduce_reference.expected_aggregates(events, 4000, 2000)
        kit.wait_results("agg", run["every"], timeout=600)
        yield run
    finally:
        client.close()
        kit.close()


def test_results_equal_the_reference(secured_run) -> None:
    kit: ReduceKit = secured_run["kit"]
    left_out = kit.left_out("agg")
    counted = reduce_reference.expected_aggregates(
        [e for i, e in enumerate(secured_run["events"]) if i not in left_out], 4000, 2000
    )
    assert_rows_right(judge(kit.rows("agg"), counted, secured_run["every"], ignore_keys=[FLUSH_KEY]))
    # the moved keys' state travelled through the routed topic: the reduce wrote it under its ACLs
    kit.wait_stats("agg", lambda s: bool(s.chunks_installed), timeout=120)


def _produce_denied(cfg: KafkaConfig, topic: str) -> KafkaError:
    """The error a plain produce of one record to ``topic`` as ``cfg``'s principal ends in."""
    errors: list[KafkaError] = []
    producer = Producer(cfg.producer(**{"message.timeout.ms": 15_000, "enable.idempotence": False}))
    producer.produce(topic, b"forbidden", b"k", on_delivery=lambda err, _msg: errors.append(err))
    producer.flush(30)
    assert errors and errors[0] is not None, f"a write to {topic} was accepted"
    return errors[0]


def test_forbidden_acts_fail_with_authorization_errors_and_change_nothing(secured_run) -> None:
    kit: ReduceKit = secured_run["kit"]
    state = secured_run["state"]
    users = service_configs(state, "secured-tests")
    control, routed = kit.layout.name("control"), kit.layout.name("routed")
    control_end = records_written(kit.kafka, control, 1)
    group = router_group(kit.prefix)
    committed_before = kit.committed()

    for who, topic in (("router", control), ("shedder", control), ("shedder", routed)):
        err = _produce_denied(users[who], topic)
        assert err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, (who, topic, err)

    # no credentials: the SASL_SSL listener speaks to nobody who does not authenticate
    stranger = Consumer({"bootstrap.servers": state.bootstrap, "group.id": "ballast-scratch.stranger",
                         "socket.timeout.ms": 5000, "log_level": 0})  # fmt: skip
    with pytest.raises(KafkaException):
        stranger.list_topics(timeout=8)
    stranger.close()
    wrong = KafkaConfig(replace(stack_connection(state, "router"), sasl_password=Secret("not-the-password")))
    reader = Consumer(wrong.consumer("ballast-scratch.wrong", **{"log_level": 0}))
    reader.assign([TopicPartition(control, 0, 0)])
    got = reader.consume(10, timeout=8)
    assert all(m.error() is not None for m in got), "a client with a wrong password read records"
    reader.close()

    # the reduce may not commit the routers' group (an OffsetCommit through the admin API: a
    # consumer's commit would wait for a coordinator its lookup is refused)
    intruder = AdminClient(users["reduce"].admin(**{"log_level": 0}))
    rewind = ConsumerGroupTopicPartitions(group, [TopicPartition(kit.input, 0, 0)])
    for future in intruder.alter_consumer_group_offsets([rewind], request_timeout=30).values():
        with pytest.raises(KafkaException) as raised:
            future.result()
        assert raised.value.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED, raised.value

    assert records_written(kit.kafka, control, 1) == control_end  # nothing written
    assert kit.committed() == committed_before  # the routers' offsets untouched
    kit.pipe.check_running(*kit.pipe.started)
    status = json.loads(kit.pipe.run_command("status", "--json", "--prefix", kit.prefix))
    assert status["controller"], status  # the controller publishes
    assert status["epoch"] == secured_run["epoch"]
    assert any(j["job"] == "agg" for j in status["jobs"]), status["jobs"]  # the reduce
    assert any(s["stage"] == "router" for s in status["lag"]), status["lag"]  # the shedder measures


def test_the_acl_set_is_complete_and_was_all_needed(secured_run) -> None:
    kit: ReduceKit = secured_run["kit"]
    out = kit.pipe.run_command("acls", "check", "--prefix", kit.prefix, "--json")
    found = json.loads(out)
    assert found["complete"] and found["authorizer"] and not found["missing"], found
    assert secured_run["acls_created"] > 0


def test_no_log_of_the_run_holds_a_password(secured_run) -> None:
    kit: ReduceKit = secured_run["kit"]
    state = secured_run["state"]
    secrets = {user: state.security.password(user) for user in state.security.users}
    folders = [Path(kit.workdir), Path(state.state_dir)]
    logs = [
        p
        for folder in folders
        for p in folder.rglob("*")
        if p.is_file() and not p.is_relative_to(state.security.folder) and p.suffix not in (".pem",)
    ]
    assert any(p.name == "service.log" for p in logs) and any(p.name == "spark.log" for p in logs)
    leaks = [
        (str(p), user)
        for p in logs
        for user, secret in secrets.items()
        if secret.encode() in p.read_bytes()
    ]
    assert not leaks, leaks
    said = kit.pipe.run_command("status", "--prefix", kit.prefix)  # what an operator prints
    assert not [user for user, secret in secrets.items() if secret in said]
