"""ACL bindings as plain rules, and the admin calls that create and list them.

Why plain rules: the set a deployment needs is pure data (:mod:`ballast.deployment.acls`),
compared with what a cluster holds by equality; confluent-kafka's ``AclBinding`` carries enums
and a host, and its equality is not what a reader of ``ballast acls show`` compares. Every rule
here is an ALLOW from any host: Ballast never writes DENY rules (an operator's DENY still wins,
and ``check`` reports only what is missing).
"""

from __future__ import annotations

from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ConfigResource,
    ResourcePatternType,
    ResourceType,
)

_RESOURCES = {
    "topic": ResourceType.TOPIC,
    "group": ResourceType.GROUP,
    "transactional_id": ResourceType.TRANSACTIONAL_ID,
    "cluster": ResourceType.BROKER,
}
_PATTERNS = {"literal": ResourcePatternType.LITERAL, "prefixed": ResourcePatternType.PREFIXED}
_OPERATIONS = {
    "read": AclOperation.READ,
    "write": AclOperation.WRITE,
    "describe": AclOperation.DESCRIBE,
    "create": AclOperation.CREATE,
    "all": AclOperation.ALL,
}


NO_AUTHORIZER = (
    "the cluster has no authorizer (authorizer.class.name is not set): ACLs are neither kept nor "
    "enforced, so every client may read and write every topic"
)


class AuthorizerMissing(RuntimeError):
    """The cluster has no authorizer: every authenticated (or anonymous) client may do anything."""


@dataclass(frozen=True, order=True)
class AclRule:
    """One ALLOW binding: ``principal`` may ``operation`` on ``resource`` (literal or prefixed name)."""

    principal: str
    resource: str  # topic, group, transactional_id
    name: str
    pattern: str  # literal, prefixed
    operation: str  # read, write, describe, create, all

    def describe(self) -> str:
        star = "*" if self.pattern == "prefixed" else ""
        return f"{self.principal} {self.operation} {self.resource} {self.name}{star}"

    def binding(self) -> AclBinding:
        return AclBinding(
            _RESOURCES[self.resource],
            self.name,
            _PATTERNS[self.pattern],
            self.principal,
            "*",
            _OPERATIONS[self.operation],
            AclPermissionType.ALLOW,
        )

    @classmethod
    def of(cls, binding: AclBinding) -> AclRule | None:
        """The rule of a binding, or None for one Ballast never writes (DENY, one host, other kinds)."""
        resources = {v: k for k, v in _RESOURCES.items()}
        patterns = {v: k for k, v in _PATTERNS.items()}
        operations = {v: k for k, v in _OPERATIONS.items()}
        if (
            binding.permission_type != AclPermissionType.ALLOW
            or binding.host != "*"
            or binding.restype not in resources
            or binding.resource_pattern_type not in patterns
            or binding.operation not in operations
        ):
            return None
        return cls(
            binding.principal,
            resources[binding.restype],
            binding.name,
            patterns[binding.resource_pattern_type],
            operations[binding.operation],
        )


def create_acls(admin: AdminClient, rules: list[AclRule], timeout: float = 30.0) -> None:
    """Create every rule (idempotent: an existing binding is not an error)."""
    if not rules:
        return
    try:
        for future in admin.create_acls([r.binding() for r in rules], request_timeout=timeout).values():
            future.result()
    except KafkaException as exc:
        _raise_if_no_authorizer(exc)
        raise


def list_acls(admin: AdminClient, timeout: float = 30.0) -> set[AclRule]:
    """Every ALLOW-from-any-host binding the cluster holds; :class:`AuthorizerMissing` on an open one."""
    everything = AclBindingFilter(
        ResourceType.ANY,
        None,
        ResourcePatternType.ANY,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    try:
        bindings = admin.describe_acls(everything, request_timeout=timeout).result()
    except KafkaException as exc:
        _raise_if_no_authorizer(exc)
        raise
    if not bindings and not _has_authorizer(admin, timeout):
        # Kafka 4's brokers answer DescribeAcls without an authorizer with no bindings, not with
        # SECURITY_DISABLED (CreateAcls still says it): "none yet" and "not enforced" differ
        raise AuthorizerMissing(NO_AUTHORIZER)
    return {rule for rule in map(AclRule.of, bindings) if rule is not None}


def _has_authorizer(admin: AdminClient, timeout: float) -> bool:
    """A broker's ``authorizer.class.name`` is set (True also when we may not read it: a cluster
    that refuses to show its configs enforces something)."""
    broker = next(iter(admin.list_topics(timeout=timeout).brokers))
    resource = ConfigResource(ResourceType.BROKER, str(broker))
    try:
        configs = admin.describe_configs([resource], request_timeout=timeout)[resource].result()
    except KafkaException:
        return True
    entry = configs.get("authorizer.class.name")
    return bool(entry is not None and entry.value)


def _raise_if_no_authorizer(exc: KafkaException) -> None:
    err = exc.args[0] if exc.args else None
    if isinstance(err, KafkaError) and err.code() == KafkaError.SECURITY_DISABLED:
        raise AuthorizerMissing(NO_AUTHORIZER) from None
