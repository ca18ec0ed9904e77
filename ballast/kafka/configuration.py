"""One Kafka connection, rendered for every client Ballast runs: librdkafka, Spark (Java) and faust.

Why the split: *where the cluster is and who we are to it* (bootstrap servers, security protocol,
SASL credentials, TLS files) is one fact of a deployment, the same for the router's librdkafka
clients, the Spark reduce's source, sink and executors, and the shedder's faust app. *How a client
behaves* (acks, idempotence, linger, isolation) is tuning, chosen per client. Before the split,
security lived in librdkafka-only ``overrides`` and the reduce rebuilt a bare bootstrap string for
Spark, so a SASL or TLS setting never reached Spark at all.

* :class:`KafkaConnection`: the connection, frozen, with one rendering per client family
  (:meth:`~KafkaConnection.librdkafka`, :meth:`~KafkaConnection.java`, :meth:`~KafkaConnection.faust`).
  Passwords are :class:`~ballast.settings.Secret` values: their ``repr`` is ``'***'``, so printing a
  connection or any rendering of it (a dict, a faust credentials object) never shows them.
  Its ``properties`` (:class:`~ballast.kafka.properties.ClientProperties`) are any other client
  setting of the deployment (``--kafka-config FILE``, ``-X KEY=VALUE``), by Java name, translated
  for each family by :mod:`ballast.kafka.property_table`.
* :class:`ClientTuning`: librdkafka client behaviour; ``overrides`` carries any other librdkafka
  property (dot.case) untouched, the way Quix Streams' ``ConnectionConfig`` does: a code-level knob
  (tests, benchmarks); users give settings through ``properties``.
* :class:`KafkaConfig`: a connection, a client id and tuning; renders producer, consumer and admin
  dicts for confluent-kafka, and the options of Spark's Kafka source and sink (``kafka.``-prefixed,
  the same acks, idempotence and isolation as our own clients). Frozen and picklable, so Spark
  ships it to executors whole (their control-log reader connects with the same credentials).

Decisions: librdkafka takes TLS files by path (``ssl.ca.location`` …). Java takes the CA as a PEM
truststore by path too (``ssl.truststore.type=PEM``), but a client certificate and key as PEM
*contents* (``ssl.keystore.certificate.chain`` / ``ssl.keystore.key``), read here on the driver,
so executors need only the CA file at the same path. SASL mechanisms with a username and password
(PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) are rendered for all three clients from the two fields;
OAUTHBEARER and GSSAPI take their credentials from the client settings (a JAAS line, librdkafka's
``sasl.oauthbearer.*`` / ``sasl.kerberos.*``), and faust speaks no OAUTHBEARER from settings.

Order in a client's properties: the connection, then tuning, then the user's client settings (so
``-X linger.ms=20`` beats the tuning default), then code's ``overrides`` and ``extra``. The settings
cannot undo Ballast's invariants (acks, idempotence, isolation, auto-commit, group and transactional
ids, the partitioner): :mod:`ballast.kafka.properties` refuses those keys outright.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from ballast.kafka import property_table
from ballast.kafka.client_log import LIBRDKAFKA_LOGGER
from ballast.kafka.properties import ClientProperties, ClientSettingError
from ballast.settings import Secret

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
# librdkafka's message.max.bytes default: the largest record (key + value + headers + its framing)
# produce() accepts; ``overrides`` may change it (make_producer's producer reports the value in use)
LIBRDKAFKA_MESSAGE_MAX_BYTES = 1_000_000
# librdkafka defaults to CRC32 ("consistent_random"); Java clients and Spark's Kafka sink use
# murmur2. Every producer Ballast ships uses murmur2 so a key lands where a JVM client puts it.
KAFKA_JAVA_PARTITIONER = "murmur2_random"

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
PASSWORD_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
SASL_MECHANISMS = (*PASSWORD_MECHANISMS, "OAUTHBEARER", "GSSAPI")
_JAAS_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}


def _jaas_quote(value: str) -> str:
    """A JAAS option value in double quotes (Kafka's JaasConfig parser reads backslash escapes)."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


@dataclass(frozen=True)
class KafkaConnection:
    """Where the cluster is and how a client authenticates to it; the same for every client."""

    bootstrap_servers: str = DEFAULT_BOOTSTRAP
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str = ""
    sasl_username: str = ""
    sasl_password: Secret = Secret("")
    ssl_ca_location: str = ""
    ssl_certificate_location: str = ""
    ssl_key_location: str = ""
    ssl_key_password: Secret = Secret("")
    properties: ClientProperties = field(default_factory=ClientProperties)

    def __post_init__(self) -> None:
        for name in ("sasl_password", "ssl_key_password"):
            value = getattr(self, name)
            if not isinstance(value, Secret):
                object.__setattr__(self, name, Secret(value or ""))
        if not self.bootstrap_servers:
            raise ValueError("bootstrap_servers must not be empty")
        if self.security_protocol not in SECURITY_PROTOCOLS:
            raise ValueError(
                f"security protocol {self.security_protocol!r} is not one of {', '.join(SECURITY_PROTOCOLS)}"
            )
        if self.sasl:
            if self.sasl_mechanism not in SASL_MECHANISMS:
                raise ValueError(
                    f"{self.security_protocol} needs a SASL mechanism, one of {', '.join(SASL_MECHANISMS)} "
                    f"(got {self.sasl_mechanism or 'none'})"
                )
            password = self.sasl_mechanism in PASSWORD_MECHANISMS
            if password and (not self.sasl_username or not self.sasl_password):
                raise ValueError(f"{self.security_protocol} needs a SASL username and password")
            if not password and (self.sasl_username or self.sasl_password):
                raise ValueError(
                    f"{self.sasl_mechanism} takes no SASL username or password: its credentials are "
                    "client settings (sasl.jaas.config, librdkafka's sasl.oauthbearer.* or sasl.kerberos.*)"
                )
        elif self.sasl_mechanism or self.sasl_username or self.sasl_password:
            raise ValueError(
                f"SASL settings given, but the security protocol is {self.security_protocol} "
                "(use SASL_PLAINTEXT or SASL_SSL)"
            )
        tls_files = (self.ssl_ca_location, self.ssl_certificate_location, self.ssl_key_location)
        if not self.tls and any(tls_files):
            raise ValueError(
                f"TLS files given, but the security protocol is {self.security_protocol} "
                "(use SSL or SASL_SSL)"
            )
        if bool(self.ssl_certificate_location) != bool(self.ssl_key_location):
            raise ValueError("a client certificate needs its key, and a key its certificate")

    @property
    def sasl(self) -> bool:
        return self.security_protocol.startswith("SASL_")

    @property
    def tls(self) -> bool:
        return self.security_protocol.endswith("SSL")

    def describe(self) -> str:
        """One line for logs: the servers and how we authenticate, never a secret."""
        how = self.security_protocol
        if self.sasl:
            how += f" {self.sasl_mechanism}" + (f" as {self.sasl_username}" if self.sasl_username else "")
        more = self.properties.describe()
        return f"{self.bootstrap_servers} ({how}{'; ' + more if more else ''})"

    # --- renderings ---------------------------------------------------------------------------

    def librdkafka(self) -> dict[str, Any]:
        """confluent-kafka / librdkafka properties of the connection."""
        conf: dict[str, Any] = {"bootstrap.servers": self.bootstrap_servers}
        if self.security_protocol != "PLAINTEXT":
            conf["security.protocol"] = self.security_protocol
        if self.sasl:
            conf["sasl.mechanism"] = self.sasl_mechanism
        if self.sasl_username:
            conf["sasl.username"] = self.sasl_username
            conf["sasl.password"] = self.sasl_password
        if self.ssl_ca_location:
            conf["ssl.ca.location"] = self.ssl_ca_location
        if self.ssl_certificate_location:
            conf["ssl.certificate.location"] = self.ssl_certificate_location
            conf["ssl.key.location"] = self.ssl_key_location
        if self.ssl_key_password:
            conf["ssl.key.password"] = self.ssl_key_password
        return conf | property_table.librdkafka(self.properties)

    def java(self) -> dict[str, Any]:
        """Java client properties of the connection (Spark's source and sink add ``kafka.``)."""
        conf: dict[str, Any] = {"bootstrap.servers": self.bootstrap_servers}
        if self.security_protocol != "PLAINTEXT":
            conf["security.protocol"] = self.security_protocol
        if self.sasl:
            conf["sasl.mechanism"] = self.sasl_mechanism
        if self.sasl_username:
            conf["sasl.jaas.config"] = Secret(
                f"{_JAAS_MODULES[self.sasl_mechanism]} required "
                f"username={_jaas_quote(self.sasl_username)} password={_jaas_quote(self.sasl_password)};"
            )
        if self.ssl_ca_location:
            conf["ssl.truststore.type"] = "PEM"
            conf["ssl.truststore.location"] = self.ssl_ca_location
        if self.ssl_certificate_location:
            conf["ssl.keystore.type"] = "PEM"
            conf["ssl.keystore.certificate.chain"] = Path(self.ssl_certificate_location).read_text()
            conf["ssl.keystore.key"] = Secret(Path(self.ssl_key_location).read_text())
        keystore = self.ssl_certificate_location or any(
            k.startswith("ssl.keystore.") for k, _ in self.properties.entries
        )
        if self.ssl_key_password and keystore:
            conf["ssl.key.password"] = self.ssl_key_password
        return conf | property_table.java(self.properties)

    def faust(self) -> dict[str, Any]:
        """``faust.App`` settings of the connection: ``broker``, ``broker_credentials`` and what the
        client settings translate to (:func:`~ballast.kafka.property_table.faust`)."""
        from faust.auth import GSSAPICredentials, SASLCredentials, SSLCredentials

        if self.sasl_mechanism == "OAUTHBEARER":
            raise ClientSettingError(
                f"sasl.mechanism OAUTHBEARER: {property_table.FAUST} takes OAuth tokens from a Python "
                "token provider, not from settings; the shedder cannot run on this connection"
            )
        options = property_table.faust(self.properties)
        broker = ";".join(f"kafka://{server.strip()}" for server in self.bootstrap_servers.split(","))
        context = self._ssl_context(options) if self.tls else None
        credentials: Any = None
        if self.sasl_mechanism == "GSSAPI":  # Kerberos login: the ticket cache (kinit) or KRB5_CLIENT_KTNAME
            credentials = GSSAPICredentials(
                kerberos_service_name=options.kerberos_service_name, ssl_context=context
            )
        elif self.sasl:
            credentials = SASLCredentials(
                username=self.sasl_username,
                password=self.sasl_password,
                mechanism=self.sasl_mechanism,
                ssl_context=context,
            )
        elif context is not None:
            credentials = SSLCredentials(context)
        return {"broker": broker, "broker_credentials": credentials, **options.settings}

    def _ssl_context(self, options: property_table.FaustOptions) -> Any:
        import ssl

        context = ssl.create_default_context(cafile=self.ssl_ca_location or None, cadata=options.cadata)
        context.check_hostname = options.check_hostname
        if self.ssl_certificate_location:
            context.load_cert_chain(
                self.ssl_certificate_location, self.ssl_key_location, self.ssl_key_password or None
            )
        elif options.certfile:
            context.load_cert_chain(options.certfile, None, self.ssl_key_password or None)
        return context


def _frozen(mapping: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return MappingProxyType(dict(mapping or {}))


@dataclass(frozen=True)
class ClientTuning:
    """How a librdkafka client behaves; the same defaults for every Ballast client."""

    # Producer side
    acks: str = "all"
    enable_idempotence: bool = True
    linger_ms: int = 5
    batch_size: int = 1_000_000
    compression_type: str = "lz4"
    partitioner: str = KAFKA_JAVA_PARTITIONER
    # Consumer side
    auto_offset_reset: str = "earliest"
    isolation_level: str = "read_committed"
    overrides: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "overrides", _frozen(self.overrides))

    def __getstate__(self) -> dict[str, Any]:
        """Picklable (Spark ships it to executors): the read-only view travels as a plain dict."""
        return {f.name: getattr(self, f.name) for f in fields(self)} | {"overrides": dict(self.overrides)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        for name, value in state.items():
            object.__setattr__(self, name, value)
        object.__setattr__(self, "overrides", _frozen(state["overrides"]))


@dataclass(frozen=True)
class KafkaConfig:
    """A connection, who we are on it (client id) and how the client behaves (tuning)."""

    connection: KafkaConnection = field(default_factory=KafkaConnection)
    client_id: str = "ballast"
    tuning: ClientTuning = field(default_factory=ClientTuning)

    @classmethod
    def plaintext(cls, bootstrap_servers: str, client_id: str = "ballast") -> KafkaConfig:
        """A config for an unsecured cluster (the local stack, tests)."""
        return cls(KafkaConnection(bootstrap_servers), client_id)

    @property
    def bootstrap_servers(self) -> str:
        return self.connection.bootstrap_servers

    @property
    def overrides(self) -> Mapping[str, Any]:
        return self.tuning.overrides

    def with_client_id(self, client_id: str) -> KafkaConfig:
        return replace(self, client_id=client_id)

    def with_overrides(self, **props: Any) -> KafkaConfig:
        """A copy with more librdkafka properties (keys may use ``_`` for ``.``)."""
        merged = dict(self.tuning.overrides)
        merged.update({k.replace("_", "."): v for k, v in props.items()})
        return replace(self, tuning=replace(self.tuning, overrides=merged))

    # --- librdkafka (confluent-kafka) -----------------------------------------------------------

    def common(self) -> dict[str, Any]:
        return self.connection.librdkafka() | {"client.id": self.client_id, "logger": LIBRDKAFKA_LOGGER}

    def _librdkafka(self, behaviour: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
        """Connection, then tuning, then the user's client settings, then code's overrides (docstring)."""
        settings = property_table.librdkafka(self.connection.properties)
        return self.common() | dict(behaviour) | settings | dict(self.tuning.overrides) | dict(extra)

    def producer(self, **extra: Any) -> dict[str, Any]:
        t = self.tuning
        behaviour = {
            "acks": t.acks,
            "enable.idempotence": t.enable_idempotence,
            "linger.ms": t.linger_ms,
            "batch.size": t.batch_size,
            "compression.type": t.compression_type,
            "partitioner": t.partitioner,
        }
        return self._librdkafka(behaviour, extra)

    def consumer(self, group_id: str, **extra: Any) -> dict[str, Any]:
        t = self.tuning
        behaviour = {
            "group.id": group_id,
            "auto.offset.reset": t.auto_offset_reset,
            "isolation.level": t.isolation_level,
            "enable.auto.commit": False,
            "enable.partition.eof": False,
        }
        return self._librdkafka(behaviour, extra)

    def admin(self, **extra: Any) -> dict[str, Any]:
        return self._librdkafka({}, extra)

    # --- Spark's Kafka source and sink ----------------------------------------------------------

    def _spark(self, props: Mapping[str, Any]) -> dict[str, Any]:
        """Connection, then tuning, then the user's client settings (as for librdkafka)."""
        settings = property_table.java(self.connection.properties)
        return {f"kafka.{k}": v for k, v in (self.connection.java() | dict(props) | settings).items()}

    def spark_source_options(self) -> dict[str, Any]:
        """``spark.readStream.format("kafka")`` options: the connection, read_committed like ours."""
        return self._spark({"isolation.level": self.tuning.isolation_level})

    def spark_sink_options(self) -> dict[str, Any]:
        """``writeStream.format("kafka")`` options: the connection, acks and idempotence like ours."""
        t = self.tuning
        props = {
            "acks": t.acks,
            "enable.idempotence": str(t.enable_idempotence).lower(),
            "linger.ms": str(t.linger_ms),
            "compression.type": t.compression_type,
        }
        return self._spark(props)
