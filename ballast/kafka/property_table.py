"""The translation table: a client setting by its Java name, rendered for librdkafka, Java and faust.

Why a table: the file a Kafka user has names Java client settings, and most of them are spelled the
same in librdkafka (``security.protocol``, ``client.dns.lookup``, ``metadata.max.age.ms`` …). The
rest is small and known: a few renamed keys, keys only one family has, and the TLS and SASL groups,
whose *form* differs (Java keystores and JAAS lines; librdkafka PEM files and plain keys; Python
``ssl`` contexts). This module is that knowledge, pure: no file is read, no client is built.

Rules, per unprefixed key (``librdkafka.KEY`` / ``java.KEY`` go to their family untranslated):

* librdkafka: :data:`RENAMED` keys get librdkafka's name; :data:`JAVA_ONLY` keys are refused; a
  truststore must be PEM (librdkafka reads no JKS/PKCS12 truststore: refused); a keystore becomes
  ``ssl.keystore.location`` (PKCS12) or certificate and key files (PEM); PEM contents become
  ``ssl.*.pem``; an OAuthBearer JAAS line with ``clientId`` becomes librdkafka's OIDC settings, a
  Krb5 one its keytab and principal; other JAAS lines are refused. Any other key is passed as it is
  (librdkafka refuses a name it does not know when the first client is built, which every command
  does at its start).
* Java: the Java names as they are; :data:`LIBRDKAFKA_ONLY` keys are refused; librdkafka's names of
  renamed keys get Java's.
* faust (aiokafka): only :data:`FAUST_SETTINGS` and the TLS pieces a Python ``ssl`` context takes
  (a PEM CA, a PEM keystore file, host-name checking) and the Kerberos service name; every other key
  is refused, since the shedder would otherwise run without a setting it was given.
* Keys whose values the families spell differently (:data:`DIFFERENT_VALUES`) must be prefixed.
* ``ssl.endpoint.identification.algorithm``: Java's empty value is librdkafka's ``none``.

A refusal is one line naming the key and the client family, with what to write instead.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ballast.kafka.properties import ClientProperties, ClientSettingError, parse_jaas, split_key
from ballast.settings import Secret, parse_bool

LIBRDKAFKA = "librdkafka (the services' own clients, the reduce's driver and executors)"
JAVA = "the Java client (Spark's Kafka source and sink)"
FAUST = "faust/aiokafka (the shedder's app)"

# Java name -> librdkafka name
RENAMED: Mapping[str, str] = {
    "fetch.max.wait.ms": "fetch.wait.max.ms",
    "receive.buffer.bytes": "socket.receive.buffer.bytes",
    "send.buffer.bytes": "socket.send.buffer.bytes",
    "max.request.size": "message.max.bytes",
}
_JAVA_NAME = {lib: java for java, lib in RENAMED.items()}

JAVA_ONLY = frozenset({
    "buffer.memory", "max.block.ms", "max.poll.records", "default.api.timeout.ms", "interceptor.classes",
    "metric.reporters", "metrics.num.samples", "metrics.recording.level", "metrics.sample.window.ms",
    "auto.include.jmx.reporter", "security.providers", "ssl.protocol", "ssl.enabled.protocols",
    "ssl.keymanager.algorithm", "ssl.trustmanager.algorithm", "ssl.secure.random.implementation",
    "ssl.engine.factory.class", "sasl.login.class", "sasl.client.callback.handler.class",
    "sasl.login.refresh.window.factor", "sasl.login.refresh.window.jitter",
    "sasl.login.refresh.min.period.seconds", "sasl.login.refresh.buffer.seconds",
    "sasl.login.connect.timeout.ms", "sasl.login.read.timeout.ms", "sasl.login.retry.backoff.ms",
    "sasl.login.retry.backoff.max.ms", "sasl.kerberos.ticket.renew.window.factor",
    "sasl.kerberos.ticket.renew.jitter",
})  # fmt: skip
LIBRDKAFKA_ONLY = frozenset({
    "socket.keepalive.enable", "socket.nagle.disable", "socket.max.fails", "statistics.interval.ms",
    "debug", "log_level", "log.connection.close", "topic.metadata.refresh.interval.ms",
    "topic.metadata.refresh.sparse", "broker.address.ttl", "broker.address.family", "api.version.request",
    "broker.version.fallback", "queue.buffering.max.messages", "queue.buffering.max.kbytes",
    "queue.buffering.max.ms", "queued.min.messages", "queued.max.messages.kbytes",
    "fetch.error.backoff.ms", "message.timeout.ms", "enable.ssl.certificate.verification", "ssl.ca.pem",
    "ssl.certificate.pem", "ssl.key.pem", "ssl.crl.location", "ssl.providers", "ssl.engine.id",
    "ssl.curves.list", "ssl.sigalgs.list", "ssl.ca.certificate.stores", "sasl.oauthbearer.method",
    "sasl.oauthbearer.client.id", "sasl.oauthbearer.client.secret", "sasl.oauthbearer.scope",
    "sasl.oauthbearer.extensions", "sasl.oauthbearer.config", "enable.sasl.oauthbearer.unsecure.jwt",
    "sasl.kerberos.keytab", "sasl.kerberos.principal",
})  # fmt: skip
DIFFERENT_VALUES = frozenset({"ssl.cipher.suites", "partition.assignment.strategy"})

TRUSTSTORE = ("ssl.truststore.type", "ssl.truststore.location", "ssl.truststore.password",
              "ssl.truststore.certificates")  # fmt: skip
KEYSTORE = ("ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password",
            "ssl.keystore.certificate.chain", "ssl.keystore.key")  # fmt: skip
SASL_LOGIN = ("sasl.jaas.config", "sasl.login.callback.handler.class")
OAUTH_HANDLERS = frozenset({
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler",
    "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerLoginCallbackHandler",
})  # fmt: skip
ENDPOINT_CHECK = "ssl.endpoint.identification.algorithm"


def _seconds(raw: str) -> float:
    return float(raw) / 1000.0


# Java name -> (faust setting, conversion) …
FAUST_SETTINGS: Mapping[str, tuple[tuple[str, Callable[[str], Any]], ...]] = {
    "request.timeout.ms": (("broker_request_timeout", _seconds), ("producer_request_timeout", _seconds)),
    "metadata.max.age.ms": (("consumer_metadata_max_age_ms", int), ("producer_metadata_max_age_ms", int)),
    "connections.max.idle.ms": (
        ("consumer_connections_max_idle_ms", int),
        ("producer_connections_max_idle_ms", int),
    ),
    "max.poll.interval.ms": (("broker_max_poll_interval", _seconds),),
    "max.poll.records": (("broker_max_poll_records", int),),
    "max.partition.fetch.bytes": (("consumer_max_fetch_size", int),),
    "check.crcs": (("broker_check_crcs", parse_bool),),
    "linger.ms": (("producer_linger", _seconds),),
    "compression.type": (("producer_compression_type", str),),
    "batch.size": (("producer_max_batch_size", int),),
    "max.request.size": (("producer_max_request_size", int),),
}
FAUST_REFUSED: Mapping[str, str] = {
    "session.timeout.ms": "the shedder's --session-timeout-s sets it",
    "heartbeat.interval.ms": "the shedder derives it from --session-timeout-s",
}


def _unprefixed(props: ClientProperties) -> dict[str, str]:
    return {k: v for k, v in props.entries if split_key(k)[0] is None}


def _prefixed(props: ClientProperties, family: str) -> dict[str, str]:
    return {name: v for k, v in props.entries for fam, name in [split_key(k)] if fam == family}


def _no_check(value: str) -> bool:
    return value.strip().lower() in ("", "none")


def _only_elsewhere(key: str, family: str, prefix: str, who: str) -> ClientSettingError:
    """A key ``family`` has no setting for: the prefixed form that gives it to the family that has."""
    instead = f"write {prefix}.{key} to give it to {who} only"
    return ClientSettingError(f"{key}: {family} has no such setting; {instead}")


def _different_values(key: str) -> ClientSettingError:
    return ClientSettingError(
        f"{key}: librdkafka and the Java client spell its values differently; "
        f"give librdkafka.{key} and java.{key}"
    )


def keystore_type(values: Mapping[str, str]) -> str:
    """Java's keystore type (default JKS; a ``.p12``/``.pfx`` file without a type is PKCS12)."""
    kind = str(values.get("ssl.keystore.type", "")).upper()
    if not kind:
        location = str(values.get("ssl.keystore.location", "")).lower()
        kind = "PKCS12" if location.endswith((".p12", ".pfx")) else "JKS"
    return kind


# --- librdkafka --------------------------------------------------------------------------------------


def librdkafka(props: ClientProperties) -> dict[str, Any]:
    """The settings as librdkafka properties (on top of the connection's own)."""
    values = _unprefixed(props)
    out = _librdkafka_tls(values) | _librdkafka_sasl(values)
    for key, value in values.items():
        if key in TRUSTSTORE or key in KEYSTORE or key in SASL_LOGIN:
            continue
        if key == ENDPOINT_CHECK:
            out[key] = "none" if _no_check(value) else value
        elif key in JAVA_ONLY:
            raise _only_elsewhere(key, LIBRDKAFKA, "java", "Spark")
        elif key in DIFFERENT_VALUES:
            raise _different_values(key)
        else:
            out[RENAMED.get(key, key)] = value
    return out | _prefixed(props, "librdkafka")


def _librdkafka_tls(values: Mapping[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if "ssl.truststore.location" in values:  # a PEM one became the connection's CA file
        kind = str(values.get("ssl.truststore.type", "JKS")).upper()
        raise ClientSettingError(
            f"ssl.truststore.location: a {kind} truststore, but {LIBRDKAFKA} reads CA certificates as "
            "PEM only; give --ssl-ca-location (a PEM file, for every client), or java.ssl.truststore.* "
            "for Spark and librdkafka.ssl.ca.location"
        )
    if "ssl.truststore.certificates" in values:
        out["ssl.ca.pem"] = values["ssl.truststore.certificates"]
    if "ssl.keystore.location" in values:
        kind, location = keystore_type(values), values["ssl.keystore.location"]
        if kind == "PKCS12":
            out["ssl.keystore.location"] = location
            if "ssl.keystore.password" in values:
                out["ssl.keystore.password"] = values["ssl.keystore.password"]
        elif kind == "PEM":  # one file holds the chain and the key; librdkafka reads each from it
            out["ssl.certificate.location"] = out["ssl.key.location"] = location
        else:
            raise ClientSettingError(
                f"ssl.keystore.location: a {kind} keystore, but {LIBRDKAFKA} reads PKCS12 or PEM only; "
                "convert it (keytool -importkeystore -deststoretype PKCS12) and set ssl.keystore.type"
            )
    if "ssl.keystore.certificate.chain" in values:
        out["ssl.certificate.pem"] = values["ssl.keystore.certificate.chain"]
    if "ssl.keystore.key" in values:
        out["ssl.key.pem"] = values["ssl.keystore.key"]
    return out


def _librdkafka_sasl(values: Mapping[str, str]) -> dict[str, Any]:
    """A JAAS line librdkafka can say its own way (PLAIN/SCRAM ones became the connection's)."""
    out: dict[str, Any] = {}
    if "sasl.jaas.config" in values:
        jaas = parse_jaas(values["sasl.jaas.config"])
        opts = jaas.options
        if jaas.short == "OAuthBearerLoginModule" and "clientId" in opts and "clientSecret" in opts:
            out["sasl.oauthbearer.method"] = "oidc"
            out["sasl.oauthbearer.client.id"] = opts["clientId"]
            out["sasl.oauthbearer.client.secret"] = Secret(opts["clientSecret"])
            if "scope" in opts:
                out["sasl.oauthbearer.scope"] = opts["scope"]
        elif jaas.short == "Krb5LoginModule":
            for option, key in (
                ("keyTab", "sasl.kerberos.keytab"),
                ("principal", "sasl.kerberos.principal"),
                ("serviceName", "sasl.kerberos.service.name"),
            ):
                if option in opts:
                    out[key] = opts[option]
        else:
            raise ClientSettingError(
                f"sasl.jaas.config: {LIBRDKAFKA} cannot log in with {jaas.short} options; write "
                "java.sasl.jaas.config for Spark and the librdkafka.sasl.* settings librdkafka needs"
            )
    handler = values.get("sasl.login.callback.handler.class")
    if handler is not None and not (handler in OAUTH_HANDLERS and out.get("sasl.oauthbearer.method")):
        raise ClientSettingError(
            f"sasl.login.callback.handler.class: {LIBRDKAFKA} loads no Java class; write "
            "java.sasl.login.callback.handler.class to give it to Spark only"
        )
    return out


# --- Java ----------------------------------------------------------------------------------------------


def java(props: ClientProperties) -> dict[str, Any]:
    """The settings as Java client properties (Spark's source and sink add ``kafka.``)."""
    out: dict[str, Any] = {}
    for key, value in _unprefixed(props).items():
        if key == ENDPOINT_CHECK:
            out[key] = "" if _no_check(value) else value
        elif key in LIBRDKAFKA_ONLY:
            raise _only_elsewhere(key, JAVA, "librdkafka", "librdkafka")
        elif key in DIFFERENT_VALUES:
            raise _different_values(key)
        else:
            out[_JAVA_NAME.get(key, key)] = value
    return out | _prefixed(props, "java")


# --- faust (aiokafka) ----------------------------------------------------------------------------------


@dataclass
class FaustOptions:
    """What the settings add to a ``faust.App``: app settings and the pieces of its SSL context."""

    settings: dict[str, Any] = field(default_factory=dict)
    cadata: str | None = None  # PEM CA certificates (ssl.truststore.certificates)
    certfile: str | None = None  # a PEM keystore file: the certificate chain and the key
    check_hostname: bool = True
    kerberos_service_name: str = "kafka"


def faust(props: ClientProperties) -> FaustOptions:
    """The settings as faust settings; a key with no aiokafka equivalent is refused (module docstring)."""
    opts = FaustOptions()
    values = _unprefixed(props)
    for key, value in values.items():
        if key == ENDPOINT_CHECK:
            opts.check_hostname = not _no_check(value)
        elif key == "ssl.truststore.certificates":
            opts.cadata = str(value)
        elif key == "ssl.keystore.location" and keystore_type(values) == "PEM":
            opts.certfile = value
        elif key in ("ssl.keystore.type", "ssl.truststore.type", "ssl.truststore.password") or (
            key == "ssl.keystore.password" and keystore_type(values) == "PEM"
        ):
            continue  # parts of a store taken above, or refused with its location
        elif key == "sasl.kerberos.service.name":
            opts.kerberos_service_name = value
        elif key in FAUST_REFUSED:
            raise ClientSettingError(f"{key}: not from the client settings for {FAUST}: {FAUST_REFUSED[key]}")
        elif key in FAUST_SETTINGS:
            for name, convert in FAUST_SETTINGS[key]:
                try:
                    opts.settings[name] = convert(value)
                except ValueError:
                    raise ClientSettingError(
                        f"{key}: expected a number or true/false, got {value!r}"
                    ) from None
        else:
            raise ClientSettingError(
                f"{key}: {FAUST} has no equivalent, and the shedder would run without it; write "
                f"{_elsewhere(key)} to give it to the other clients only"
            )
    return opts


def _elsewhere(key: str) -> str:
    """The prefixed keys that keep a setting for the families that have it."""
    if key in LIBRDKAFKA_ONLY:
        return f"librdkafka.{key}"
    if key in JAVA_ONLY or key in TRUSTSTORE or key in KEYSTORE or key in SASL_LOGIN:
        return f"java.{key}"
    return f"librdkafka.{key} and java.{key}"
