"""A router's real Kafka clients, built only after the control log's genesis agrees with its flags.

Why apart from the loop: the loop takes injected clients (tests drive it with recording fakes);
which clients a deployment gets, and the order of the checks before the first one that can fence a
running router (the transactional producer), is a concern of its own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, Producer

from ballast.control.genesis import check_router
from ballast.control.log import ControlLogReader
from ballast.control.state import initial_state
from ballast.kafka.admin import make_admin, partition_count
from ballast.kafka.clients import DeliveryTracker, make_consumer, make_producer
from ballast.kafka.configuration import KafkaConfig
from ballast.kafka.topics import TopicLayout
from services.router.config import RouterSettings


@dataclass
class RouterClients:
    consumer: Consumer
    producer: Producer
    control: ControlLogReader
    routed_partitions: int
    deliveries: DeliveryTracker
    new_producer: Callable[[], Producer] | None  # exactly-once: another like ``producer``


def router_clients(
    settings: RouterSettings, layout: TopicLayout, kafka: KafkaConfig, active_workers: int = 0
) -> RouterClients:
    """Waits for the routed topic, checks the flags against the control log's genesis, builds the
    control reader (epoch 0 comes from the log), the producer (transactional, fenced by
    ``init_transactions``, in exactly-once mode) and the consumer.

    ``layout.workers`` must equal the routed partitions the genesis records (and the routed
    topic's), and a non-zero ``active_workers`` the genesis's active workers; otherwise
    :class:`~ballast.control.genesis.GenesisConflictError`, and
    :class:`~ballast.control.genesis.GenesisMissingError` for a log without genesis. These are
    checked before the producer exists, so a misconfigured instance never fences a running one.
    Raises :class:`~ballast.kafka.admin.TopicMissingError` when a topic does not exist.
    """
    settings = settings.resolved(layout.prefix)  # the deployment's group (ballast.kafka.identities)
    rid = settings.router_id
    admin = make_admin(kafka)
    routed_topic, control_topic = layout.name("routed"), layout.name("control")
    routed = partition_count(admin, routed_topic)
    partition_count(admin, control_topic)  # it must exist: one clear error, not a stall
    # the reader expects the routed topic's partitions; the fold refuses a log recorded for others
    control = ControlLogReader(kafka, control_topic, initial_state(routed))
    try:
        where = (control_topic, layout.prefix, layout.workers, routed_topic, routed, active_workers)
        check_router(control.genesis(), *where)
        deliveries = DeliveryTracker()
        pconf: dict[str, Any] = {"client.id": f"{rid}-producer"}
        if settings.exactly_once:
            pconf["transactional.id"] = settings.transactional_id
        else:
            # delivery reports only for failures: no Python callback per record
            pconf["on_delivery"] = deliveries
            pconf["delivery.report.only.error"] = True

        def new_producer() -> Producer:
            producer = make_producer(kafka, **pconf)
            if settings.exactly_once:
                # fences a zombie with the same id and aborts its open transaction
                producer.init_transactions(60)
            return producer

        producer = new_producer()
        cconf: dict[str, Any] = {
            "client.id": f"{rid}-consumer",
            "session.timeout.ms": settings.session_timeout_ms,
            "max.poll.interval.ms": settings.max_poll_interval_ms,
            "topic.metadata.refresh.interval.ms": settings.metadata_refresh_ms,
        }
        if settings.static_membership:
            cconf["group.instance.id"] = rid
        consumer = make_consumer(kafka, settings.group_id, **cconf)
    except BaseException:
        control.close()
        raise
    return RouterClients(
        consumer, producer, control, routed, deliveries, new_producer if settings.exactly_once else None
    )
