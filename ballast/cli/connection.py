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
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

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
from ballast.paths import DEFAULT_STATE_DIR
from ballast.settings import Secret, Settings, setting


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

    def __post_init__(self) -> None:
        self.connection()  # contradictory security settings are a usage error before anything runs

    def bootstrap_servers(self) -> str:
        """Flag or env, then the recorded local stack, then 127.0.0.1:9092."""
        if self.bootstrap:
            return self.bootstrap
        try:
            # a folder that so far runs only Spark records no brokers, hence no bootstrap
            return StackState.load(self.state_dir).bootstrap or DEFAULT_BOOTSTRAP
        except StackError:
            return DEFAULT_BOOTSTRAP

    def connection(self) -> KafkaConnection:
        stack_admin = self._stack_admin()
        if stack_admin is not None:
            return stack_admin
        return KafkaConnection(
            bootstrap_servers=self.bootstrap_servers(),
            security_protocol=self.security_protocol,
            sasl_mechanism=self.sasl_mechanism,
            sasl_username=self.sasl_username,
            sasl_password=self.sasl_password,
            ssl_ca_location=self.ssl_ca_location,
            ssl_certificate_location=self.ssl_certificate_location,
            ssl_key_location=self.ssl_key_location,
            ssl_key_password=self.ssl_key_password,
        )

    def _stack_admin(self) -> KafkaConnection | None:
        """A secured local stack's admin, when the address comes from its folder and no security is
        given: its folder holds the admin's password (mode 0600), as a kubeconfig holds a cluster's
        admin credentials. A service the stack starts is given its own user instead."""
        given = self.security_protocol != "PLAINTEXT" or self.sasl_username or self.ssl_ca_location
        if self.bootstrap or given:
            return None
        try:
            stack = StackState.load(self.state_dir)
        except StackError:
            return None
        if stack.security is None or not stack.nodes:
            return None
        return stack_connection(stack, ADMIN_USER)

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
        the processes it starts (:meth:`to_argv` for the flags, :meth:`secret_env` for passwords)."""
        c = kafka.connection
        return cls(
            bootstrap=c.bootstrap_servers,
            state_dir=state_dir or DEFAULT_STATE_DIR,
            security_protocol=c.security_protocol,
            sasl_mechanism=c.sasl_mechanism,
            sasl_username=c.sasl_username,
            sasl_password=c.sasl_password,
            ssl_ca_location=c.ssl_ca_location,
            ssl_certificate_location=c.ssl_certificate_location,
            ssl_key_location=c.ssl_key_location,
            ssl_key_password=c.ssl_key_password,
        )
