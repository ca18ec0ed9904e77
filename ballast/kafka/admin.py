"""Admin calls Ballast makes: is a broker there, how many partitions, create or verify topics.

Why here and once: right after creation a topic can be listed with no partitions (or
LEADER_NOT_AVAILABLE) until its metadata reaches the broker that answers. Every caller that asks
"how many partitions does this topic have" must wait that out, or it reads a false 0 (one copy of
this question lacked the wait once). So the question has exactly one answer:
:func:`partition_count`.

:func:`require_broker` is the fast, quiet "is anybody there" check commands run first: without it,
a client against a dead address retries for tens of seconds and prints hundreds of librdkafka
"Connection refused" lines before a traceback. Being the first librdkafka client a command makes,
it is also where a client setting librdkafka does not know (``--kafka-config``, ``-X``) becomes
one line naming it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from ballast.kafka.configuration import KafkaConfig
from ballast.kafka.properties import ClientSettingError
from ballast.kafka.topics import TopicSpec, find_conflicts
from ballast.waiting import WaitTimeout, wait_until


class BrokerUnreachable(RuntimeError):
    """No broker answered at the bootstrap address; the message tells the user what to do."""


class TopicMissingError(RuntimeError):
    """A topic Ballast needs does not exist (or has no partitions after waiting)."""


class TopicConflictError(RuntimeError):
    """A topic exists with a partition count or config that contradicts its declaration."""


def make_admin(cfg: KafkaConfig, **extra: object) -> AdminClient:
    return AdminClient(cfg.admin(**extra))


def require_broker(cfg: KafkaConfig, timeout: float = 5.0) -> None:
    """Raise :class:`BrokerUnreachable` unless a broker answers a metadata request within ``timeout``.

    The probe's own librdkafka log is silenced (``log_level`` 0): the one line the user needs is
    the exception's message.
    """
    conf = cfg.admin(**{"log_level": 0, "socket.connection.setup.timeout.ms": int(timeout * 1000)})
    conf.pop("logger", None)
    _require_files(conf)
    try:
        probe = AdminClient(conf)
    except KafkaException as exc:  # a property librdkafka does not know, or a value it refuses
        settings = cfg.connection.properties
        hint = f" ({settings.describe()})" if settings else ""
        raise ClientSettingError(f"librdkafka refuses the client settings: {_reason(exc)}{hint}") from None
    try:
        probe.list_topics(timeout=timeout)
    except KafkaException as exc:
        raise BrokerUnreachable(
            f"no broker at {cfg.bootstrap_servers} — start one with `ballast stack up` or pass --bootstrap"
            f" ({_reason(exc)})"
        ) from None


def _require_files(conf: Mapping[str, object]) -> None:
    """Every file a librdkafka property names exists. Why before the client: librdkafka (2.x, as
    confluent-kafka 2.16 bundles it) aborts the whole process, instead of raising, when a client
    with OIDC configured fails to start, e.g. on a CA file that is not there."""
    for key in ("ssl.ca.location", "ssl.certificate.location", "ssl.key.location", "ssl.keystore.location",
                "ssl.crl.location", "sasl.kerberos.keytab"):  # fmt: skip
        path = conf.get(key)
        if path and path != "probe" and not os.path.exists(str(path)):
            raise ClientSettingError(f"{key}: no such file: {path}")


def _reason(exc: KafkaException) -> str:
    return exc.args[0].str() if exc.args and isinstance(exc.args[0], KafkaError) else str(exc)


def partition_count(admin: AdminClient, topic: str, timeout: float = 15.0) -> int:
    """Partitions of ``topic``, waiting while a just-created topic is listed without partitions."""

    def count() -> int:
        meta = admin.list_topics(topic, timeout=min(timeout, 10.0)).topics.get(topic)
        ok = meta is not None and meta.error is None and meta.partitions
        return len(meta.partitions) if ok else 0

    try:
        return wait_until(count, timeout, f"partitions of topic {topic}", interval=0.2)
    except WaitTimeout:
        raise TopicMissingError(f"topic {topic} does not exist (run `ballast topics create`)") from None


@dataclass(frozen=True)
class TopicDescription:
    """What the cluster says about one topic."""

    name: str
    partitions: int
    config: Mapping[str, str]


def describe_topics(
    admin: AdminClient, names: list[str] | None = None, timeout: float = 10.0
) -> dict[str, TopicDescription]:
    """Partitions and (non-default and default) configs of ``names`` that exist (all topics if None)."""
    listed = admin.list_topics(timeout=timeout).topics
    wanted = [n for n in (names if names is not None else sorted(listed)) if n in listed]
    wanted = [n for n in wanted if not n.startswith("__")] if names is None else wanted
    configs = _describe_topic_configs(admin, wanted, timeout) if wanted else {}
    return {n: TopicDescription(n, len(listed[n].partitions), configs[n]) for n in wanted}


def ensure_topics(
    admin: AdminClient,
    specs: Mapping[str, TopicSpec] | list[TopicSpec],
    replication: int = -1,
    timeout: float = 30.0,
) -> dict[str, str]:
    """Create missing topics and verify existing ones; returns ``{topic: "created" | "exists"}``.

    ``replication=-1`` lets the broker use ``default.replication.factor``. Raises
    :class:`TopicConflictError` listing every mismatch, without changing anything.
    """
    wanted = list(specs.values()) if isinstance(specs, Mapping) else list(specs)
    existing = _partition_counts(admin, {s.name for s in wanted}, timeout)
    result: dict[str, str] = {}

    missing = [s for s in wanted if s.name not in existing]
    if missing:
        futures = admin.create_topics(
            [NewTopic(s.name, s.partitions, replication, config=dict(s.config)) for s in missing],
            operation_timeout=timeout,
        )
        for name, fut in futures.items():
            try:
                fut.result()
                result[name] = "created"
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise
                # created concurrently by another process: verify it like any existing topic
                existing[name] = partition_count(admin, name, timeout)

    to_check = [s for s in wanted if s.name not in result]
    problems: list[str] = []
    if to_check:
        configs = _describe_topic_configs(admin, [s.name for s in to_check], timeout)
        for s in to_check:
            problems += find_conflicts(s, existing[s.name], configs[s.name])
            result[s.name] = "exists"
    if problems:
        raise TopicConflictError(
            "existing topics contradict Ballast's layout (nothing was changed):\n  " + "\n  ".join(problems)
        )
    return result


def _describe_topic_configs(
    admin: AdminClient, names: list[str], timeout: float
) -> dict[str, dict[str, str]]:
    """Topic configs by name; retries while a just-created topic is not yet known to every broker."""

    def describe() -> dict[str, dict[str, str]] | None:
        described = admin.describe_configs([ConfigResource("topic", n) for n in names])
        try:
            return {res.name: {k: v.value for k, v in fut.result().items()} for res, fut in described.items()}
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise
            return None

    return wait_until(describe, timeout, f"configs of topics {names}", interval=0.2)


def _partition_counts(admin: AdminClient, names: set[str], timeout: float) -> dict[str, int]:
    """Partition counts of those ``names`` that exist, waiting out topics still being created."""
    state: dict[str, int] = {}

    def settled() -> bool:
        topics = admin.list_topics(timeout=timeout).topics
        present = {n: topics[n] for n in names if n in topics}
        state.clear()
        state.update({n: len(t.partitions) for n, t in present.items()})
        return all(t.error is None and t.partitions for t in present.values())

    # on time-out report what we have; ensure_topics then names the odd topic as a conflict
    with contextlib.suppress(WaitTimeout):
        wait_until(settled, timeout, "topic metadata to settle", interval=0.2)
    return state
