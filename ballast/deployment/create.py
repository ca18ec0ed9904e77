"""Create a deployment: its topics, then the genesis of its control log. The one way to set one up.

Why one function: ``ballast topics create``, the demo, the router benchmark and the tests all set up
deployments; when one of them created topics without writing the genesis, its routers would take
epoch 0 from their own flags again. So every caller goes through :func:`create_deployment`.

Why the genesis is first looked for without the writer: opening the writer fences every other
writer of the log (a running controller, say), and re-running ``topics create`` on a live
deployment must not do that. Only a log that needs its genesis gets the writer, which checks again
under its fence.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from confluent_kafka.admin import AdminClient

from ballast.control.genesis import Genesis, check_create
from ballast.control.log import ControlLogReader
from ballast.control.signing import SigningKey
from ballast.control.state import initial_state
from ballast.control.writer import ControlLogWriter
from ballast.deployment.acls import Principals, deployment_acls, missing_rules
from ballast.kafka.acls import create_acls, list_acls
from ballast.kafka.admin import ensure_topics, make_admin, partition_count
from ballast.kafka.configuration import KafkaConfig
from ballast.kafka.topics import TopicLayout, TopicSpec


@dataclass(frozen=True)
class Deployment:
    """What :func:`create_deployment` found or made."""

    topics: dict[str, str]  # topic -> "created" | "exists"
    genesis: Genesis
    genesis_status: str  # "written" | "rebased" | "exists"


def create_deployment(
    kafka: KafkaConfig,
    layout: TopicLayout,
    active_workers: int = 0,
    replication: int = -1,
    specs: Mapping[str, TopicSpec] | None = None,
    admin: AdminClient | None = None,
    issuer: str = "ballast-topics-create",
    timeout: float = 30.0,
    signing_key: SigningKey | None = None,
) -> Deployment:
    """Create (or verify) the layout's topics and give its control log a genesis; idempotent.

    ``signing_key`` (default: ``BALLAST_CONTROL_SIGNING_KEY_FILE``'s) signs a new genesis, which
    makes the log signed (:mod:`ballast.control.signing`).

    ``specs`` replaces the layout's topic declarations (a benchmark's routed topic with
    LogAppendTime, say); the genesis records the routed topic's partitions as created.
    ``active_workers`` (0: all routed partitions) is epoch 0's hash modulus for a new genesis and
    must agree with an existing one. Raises
    :class:`~ballast.kafka.admin.TopicConflictError` or
    :class:`~ballast.control.genesis.GenesisConflictError` without changing anything.
    """
    specs = specs or layout.specs()
    initial_state(specs["routed"].partitions, active_workers)  # a bad --active-workers changes nothing
    admin = admin or make_admin(kafka)
    topics = ensure_topics(admin, specs, replication=replication, timeout=timeout)
    routed = partition_count(admin, layout.name("routed"), timeout=timeout)
    control = layout.name("control")
    reader = ControlLogReader(kafka, control)
    try:
        recorded = reader.genesis(timeout)
    finally:
        reader.close()
    if recorded is not None:
        check_create(recorded, control, routed, active_workers)
        return Deployment(topics, recorded, "exists")
    writer = ControlLogWriter(kafka, control, issuer=issuer, signing_key=signing_key)
    try:
        status, genesis = writer.write_genesis(routed, active_workers, timeout)
    finally:
        writer.close()
    return Deployment(topics, genesis, status)


def grant_deployment(
    kafka: KafkaConfig, layout: TopicLayout, principals: Principals, admin: AdminClient | None = None
) -> tuple[int, int]:
    """Create the deployment's missing ACLs (:mod:`ballast.deployment.acls`); (created, present).

    Raises :class:`~ballast.kafka.acls.AuthorizerMissing` on a cluster without an authorizer.
    """
    admin = admin or make_admin(kafka)
    rules = deployment_acls(layout, principals)
    missing = missing_rules(rules, list_acls(admin))
    create_acls(admin, missing)
    return len(missing), len(rules) - len(missing)
