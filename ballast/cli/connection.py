"""How a command or service finds Kafka: the connection flags, else the local stack in ``--state-dir``.

Why here, in the command-line layer, and not in :mod:`ballast.kafka`: "flag, else environment, else
the recorded local stack, else 127.0.0.1:9092" and "check that a broker answers before doing
anything" must mean the same in every command and service, so a missing broker is one line within
seconds everywhere. The local stack is a development convenience of the commands; the Kafka
library below knows nothing of it (:class:`~ballast.kafka.configuration.KafkaConnection` is
just a connection).

The security settings (protocol, SASL mechanism and credentials, TLS files) are part of the same
group: set once (flags or ``BALLAST_*`` variables), they reach every client a command builds,
librdkafka, Spark and faust alike. Passwords are :class:`~ballast.settings.Secret` settings: best
given through the environment (a flag shows in ``ps``), never printed, and passed to child
processes through their environment (:meth:`~ballast.settings.Settings.secret_env`).

Any other client setting comes from ``--kafka-config FILE`` (Java properties, the file Kafka's own
tools take as ``--command-config``) and ``-X KEY=VALUE`` (:mod:`ballast.kafka.properties`). Its
connection keys (``security.protocol``, a PLAIN/SCRAM JAAS line …) fill the settings above that
no flag or variable gave (a flag left at its default counts as not given); given both ways, they
must agree. A child process gets the file's path, and the connection fields only where they did
not come from the file, so the file's contents never reach a command line or an environment.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from ballast.devstack.processes import pid_alive
from ballast.devstack.security import ADMIN_USER, stack_connection
from ballast.devstack.state import StackError, StackState
from ballast.kafka.admin import BrokerUnreachable, require_broker
from ballast.kafka.configuration import (
    DEFAULT_BOOTSTRAP,
    SASL_MECHANISMS,
    SECURITY_PROTOCOLS,
    KafkaConfig,
    KafkaConnection,
)
from ballast.kafka.properties import SECRET_FIELDS, ClientProperties, is_secret, merge_fields
from ballast.paths import DEFAULT_STATE_DIR
from ballast.settings import Secret, Settings, setting, split_pair

# the settings that are KafkaConnection fields of the same name (bootstrap is the odd one out)
_FIELDS = (
    "security_protocol", "sasl_mechanism", "sasl_username", "sasl_password", "ssl_ca_location",
    "ssl_certificate_location", "ssl_key_location", "ssl_key_password",
)  # fmt: skip


@dataclass(frozen=True)
class ConnectionSettings(Settings):
    """How a command finds Kafka: a bootstrap list, else the local stack recorded in ``state_dir``."""

    bootstrap: str = setting(
        "",
        "bootstrap servers (none: the local stack's in --state-dir, else 127.0.0.1:9092)",
        env="BALLAST_BOOTSTRAP_SERVERS",
    )
    state_dir: Path = setting(DEFAULT_STATE_DIR, "local stack folder: state, data and logs")
    security_protocol: str = setting(
        "PLAINTEXT", "how clients talk to the brokers", choices=SECURITY_PROTOCOLS
    )
    sasl_mechanism: str = setting("", "SASL mechanism (SASL_* protocols)", choices=("", *SASL_MECHANISMS))
    sasl_username: str = setting("", "SASL username")
    sasl_password: Secret = setting(Secret(""), "SASL password")
    ssl_ca_location: str = setting("", "PEM file of the CA that signed the brokers' certificates (TLS)")
    ssl_certificate_location: str = setting("", "PEM file of this client's certificate (TLS client auth)")
    ssl_key_location: str = setting("", "PEM file of this client's private key (TLS client auth)")
    ssl_key_password: Secret = setting(Secret(""), "password of the client's private key")
    config_file: str = setting(
        "",
        "Java properties file of more Kafka client settings, by Java client name, like Kafka tools' "
        "--command-config (OAUTHBEARER, GSSAPI, keystores, any client setting; docs/security.md)",
        flag="--kafka-config",
        env="BALLAST_KAFKA_CONFIG",
        metavar="FILE",
    )
    kafka_properties: tuple[str, ...] = setting(
        (),
        "one more Kafka client setting, KEY=VALUE by Java client name (librdkafka.KEY / java.KEY: "
        "that client family only); beats the --kafka-config file; secrets only in the file or variable",
        flag="-X",
        aliases=("--kafka-property",),
        pairs=True,
        secret_key=is_secret,
        secret_elsewhere="the --kafka-config file",
    )

    def __post_init__(self) -> None:
        # built in code too (of(), tests): its secret entries must be Secret, or to_argv shows them
        object.__setattr__(self, "kafka_properties", self.pairs("kafka_properties", self.kafka_properties))
        # contradictory security settings, an unreadable file, a setting Ballast owns or librdkafka
        # cannot take: a usage error before anything runs (every command makes librdkafka clients)
        self.connection().librdkafka()

    def bootstrap_servers(self) -> str:
        """Flag or env, then the recorded local stack, then 127.0.0.1:9092."""
        if self.bootstrap:
            return self.bootstrap
        try:
            # a folder that so far runs only Spark records no brokers, hence no bootstrap
            return StackState.load(self.state_dir).bootstrap or DEFAULT_BOOTSTRAP
        except StackError:
            return DEFAULT_BOOTSTRAP

    def client_properties(self) -> ClientProperties:
        """The ``--kafka-config`` file and the ``-X`` entries, read and checked."""
        return ClientProperties.load(
            self.config_file, (split_pair(item, "-X") for item in self.kafka_properties)
        )

    def connection(self) -> KafkaConnection:
        props = self.client_properties()
        stack_admin = self._stack_admin(props)
        if stack_admin is not None:
            return stack_admin
        defaults = {f.name: f.default for f in fields(self)}
        given: dict[str, Any] = {n: getattr(self, n) for n in _FIELDS if getattr(self, n) != defaults[n]}
        if self.bootstrap:
            given["bootstrap_servers"] = self.bootstrap
        merged = merge_fields(given, props)
        merged.setdefault("bootstrap_servers", self.bootstrap_servers())
        return KafkaConnection(**merged, properties=props)

    def _stack_admin(self, props: ClientProperties) -> KafkaConnection | None:
        """A secured local stack's admin, when the address comes from its folder and no security is
        given: its folder holds the admin's password (mode 0600), as a kubeconfig holds a cluster's
        admin credentials. A service the stack starts is given its own user instead. Client settings
        that name no part of the connection apply to the admin too."""
        given = self.security_protocol != "PLAINTEXT" or self.sasl_username or self.ssl_ca_location
        if self.bootstrap or given or props.lifted:
            return None
        try:
            stack = StackState.load(self.state_dir)
        except StackError:
            return None
        if stack.security is None or not stack.nodes:
            return None
        return replace(stack_connection(stack, ADMIN_USER), properties=props)

    def kafka_config(self, client_id: str = "ballast") -> KafkaConfig:
        return KafkaConfig(self.connection(), client_id)

    def checked_kafka_config(self, client_id: str = "ballast", timeout: float = 5.0) -> KafkaConfig:
        """:meth:`kafka_config` once a broker answered; else :class:`BrokerUnreachable` in ``timeout`` s.

        Commands call this first, so a missing broker is one line within seconds instead of a
        client retrying (and logging) for tens of seconds. When the address came from a recorded
        local stack, the message says how to start that stack again.
        """
        cfg = self.kafka_config(client_id)
        try:
            require_broker(cfg, timeout=timeout)
        except BrokerUnreachable as exc:
            if self.bootstrap:
                raise
            try:
                stack = StackState.load(self.state_dir)
            except StackError:
                raise exc from None
            if any(pid_alive(n.pid, stack.state_dir) for n in stack.nodes):
                raise
            raise BrokerUnreachable(
                f"no broker at {cfg.bootstrap_servers}: the stack recorded in {self.state_dir} is not "
                f"running — start it with `ballast stack up --state-dir {self.state_dir}` or pass --bootstrap"
            ) from exc
        return cfg

    @classmethod
    def of(cls, kafka: KafkaConfig, state_dir: Path | None = None) -> ConnectionSettings:
        """The settings that give ``kafka``'s connection back: how a process hands its connection to
        the processes it starts (:meth:`to_argv` for the flags, :meth:`secret_env` for passwords).

        Client settings go back as the file's path and the ``-X`` entries; a connection field the
        file (or an entry) set is left to it, so the file's contents travel in neither."""
        c, props = kafka.connection, kafka.connection.properties
        lifted = dict(props.lifted)

        def own(name: str, value: Any, default: Any) -> Any:
            return default if name in lifted and lifted[name] == value else value

        values = {n: own(n, getattr(c, n), cls.__dataclass_fields__[n].default) for n in _FIELDS}
        for name in SECRET_FIELDS:
            values[name] = Secret(values[name])
        return cls(
            bootstrap=own("bootstrap_servers", c.bootstrap_servers, ""),
            state_dir=state_dir or DEFAULT_STATE_DIR,
            config_file=props.file,
            kafka_properties=tuple(f"{k}={v}" for k, v in props.given),
            **values,
        )
