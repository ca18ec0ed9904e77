"""Any other Kafka client setting: read by its Java name from a properties file and ``KEY=VALUE`` entries.

Why: a cluster that needs OAUTHBEARER, GSSAPI, a keystore, or any setting beyond the connection
flags must have a way in, and its operators already have one: the ``client.properties`` file they
give Kafka's own tools (``--command-config``). So ``--kafka-config FILE`` (``BALLAST_KAFKA_CONFIG``)
reads that file, Java properties syntax and Java client names, and ``-X KEY=VALUE``
(``--kafka-property``, ``BALLAST_KAFKA_PROPERTIES`` one entry a line) adds or replaces single
entries: file, then the variable, then the flags. :mod:`ballast.kafka.property_table` renders the
result for each client family (librdkafka, Java/Spark, faust).

Decisions:

* **Family prefixes.** ``librdkafka.KEY`` and ``java.KEY`` give a setting to that family only, under
  that name, untranslated (a setting one family has, or the same name spelled with different values,
  like cipher suites). An unprefixed key is meant for every client and is translated.
* **Ballast's own keys are refused** (:data:`OWNED`, also prefixed): group and transactional ids,
  isolation, auto-commit, acks, idempotence, the partitioner, client ids, serializers. They carry the
  pipeline's guarantees; a value from a file would silently break them.
* **Connection keys fill the connection** (:data:`LIFTED`): ``bootstrap.servers``,
  ``security.protocol``, ``sasl.mechanism``, librdkafka's ``sasl.username``/``sasl.password`` and
  PEM file names, a PEM truststore, and a PLAIN/SCRAM ``sasl.jaas.config`` (its username and
  password). A Kafka tool's file then works as it is, and each family gets the connection rendered
  its own way (a JAAS line for Java, username and password for librdkafka and faust). The same
  setting given as a flag too must agree, or it is an error.
* **Secrets.** A key that names a secret (:func:`is_secret`: passwords, secrets, tokens, JAAS lines,
  private keys) holds a :class:`~ballast.settings.Secret`: ``'***'`` in every repr, never in an error
  message, refused as ``-X`` on the command line (``ps`` shows it); the file and the variable are the
  safe ways. A child process gets the file's *path* (and the ``-X`` entries: the secret ones through
  its environment), never the file's contents.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ballast.settings import Secret, SettingsError

FAMILIES = ("librdkafka", "java")  # the prefixes: librdkafka.KEY, java.KEY

# Why each is Ballast's: one line each, shown when a file or -X sets it
OWNED: Mapping[str, str] = {
    "group.id": "each service names its consumer group from the deployment",
    "group.instance.id": "each service's static member id is its instance id",
    "transactional.id": "routers and the controller derive theirs from the deployment (fencing)",
    "enable.auto.commit": "offsets are committed with the output or by the service, never automatically",
    "enable.auto.offset.store": "offsets are stored with the output, never automatically",
    "isolation.level": "every reader reads committed records only (read_committed)",
    "enable.idempotence": "exactly-once output needs idempotent producers",
    "acks": "exactly-once output needs acks=all",
    "partitioner": "a key must land where Java's murmur2 partitioner puts it (the routing function)",
    "partitioner.class": "a key must land where Java's murmur2 partitioner puts it (the routing function)",
    "auto.offset.reset": "where a new group starts is each service's choice (the shedder's --metrics-from)",
    "client.id": "each client is named after its service and instance (logs, broker metrics and quotas)",
    "enable.partition.eof": "the services' consume loops depend on it",
    "key.serializer": "records are bytes Ballast encodes itself (Avro)",
    "value.serializer": "records are bytes Ballast encodes itself (Avro)",
    "key.deserializer": "records are bytes Ballast decodes itself (Avro)",
    "value.deserializer": "records are bytes Ballast decodes itself (Avro)",
}

# key -> the KafkaConnection field it fills
LIFTED: Mapping[str, str] = {
    "bootstrap.servers": "bootstrap_servers",
    "security.protocol": "security_protocol",
    "sasl.mechanism": "sasl_mechanism",
    "sasl.username": "sasl_username",
    "sasl.password": "sasl_password",
    "ssl.ca.location": "ssl_ca_location",
    "ssl.certificate.location": "ssl_certificate_location",
    "ssl.key.location": "ssl_key_location",
    "ssl.key.password": "ssl_key_password",
}
SECRET_FIELDS = ("sasl_password", "ssl_key_password")

_SECRET_WORDS = ("password", "passphrase", "secret", "token", "credentials")
_SECRET_KEYS = ("sasl.jaas.config", "ssl.keystore.key", "ssl.key.pem", "sasl.oauthbearer.config")

PASSWORD_MODULES = {
    "org.apache.kafka.common.security.plain.PlainLoginModule": ("PLAIN",),
    "org.apache.kafka.common.security.scram.ScramLoginModule": ("SCRAM-SHA-256", "SCRAM-SHA-512"),
}


class ClientSettingError(SettingsError):
    """A client setting Ballast cannot take (its own, unreadable, or not expressible for a client
    family); a usage error: one line, exit code 2, never a secret's value."""


def split_key(key: str) -> tuple[str | None, str]:
    """(the family a prefix names, or None; the key without it)."""
    family, _, rest = key.partition(".")
    if family in FAMILIES and rest:
        return family, rest
    return None, key


def is_secret(key: str) -> bool:
    """Whether a key's value is a secret: its last word says password, secret, token …, or it is a
    JAAS line or private key contents (``sasl.oauthbearer.token.endpoint.url`` is a URL: no)."""
    name = split_key(key)[1].lower()
    last = re.split(r"[._-]", name)[-1]
    return name in _SECRET_KEYS or name.endswith("private.key.pem") or last in _SECRET_WORDS


# --- the Java properties format --------------------------------------------------------------------

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _logical_lines(text: str) -> Iterable[tuple[int, str]]:
    """(first line number, text) of each logical line: comments dropped, ``\\`` continuations joined."""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        number, line = i + 1, lines[i].lstrip()
        i += 1
        if not line or line[0] in "#!":
            continue
        while _continues(line) and i < len(lines):
            line = line[:-1] + lines[i].lstrip()
            i += 1
        if _continues(line):
            line = line[:-1]
        yield number, line


def _continues(line: str) -> bool:
    trailing = len(line) - len(line.rstrip("\\"))
    return trailing % 2 == 1


def _unescape(text: str) -> str:
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            n = text[i + 1]
            if n == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", text[i + 2 : i + 6]):
                out.append(chr(int(text[i + 2 : i + 6], 16)))
                i += 6
                continue
            out.append(_ESCAPES.get(n, n))
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def parse_properties(text: str, source: str) -> list[tuple[str, str]]:
    """A Java ``.properties`` text as (key, value) pairs in file order (``java.util.Properties``
    rules: ``#``/``!`` comments, ``=``, ``:`` or blanks between key and value, ``\\`` escapes and
    line continuations)."""
    pairs = []
    for number, line in _logical_lines(text):
        i = 0
        while i < len(line) and line[i] not in "=: \t\f":
            i += 2 if line[i] == "\\" else 1
        key, rest = line[:i], line[i:].lstrip(" \t\f")
        if rest[:1] in ("=", ":"):
            rest = rest[1:].lstrip(" \t\f")
        if not key:
            raise ClientSettingError(f"{source}: line {number}: no key")
        pairs.append((_unescape(key), _unescape(rest)))
    return pairs


# --- JAAS lines ------------------------------------------------------------------------------------

_JAAS_OPTION = re.compile(r'\s*([\w.-]+)\s*=\s*("(?:[^"\\]|\\.)*"|[^\s;"]+)')


@dataclass(frozen=True)
class Jaas:
    """One ``sasl.jaas.config`` line: ``<LoginModule> <flag> key=value … ;``."""

    module: str
    options: Mapping[str, str]

    @property
    def short(self) -> str:
        return self.module.rsplit(".", 1)[-1]


def parse_jaas(text: str) -> Jaas:
    """The module and options of a JAAS line; a :class:`ClientSettingError` that never shows the
    line (it holds credentials) when it is not one."""
    bad = ClientSettingError(
        'sasl.jaas.config: not a JAAS line (expected `<LoginModule> required key="value" …;`)'
    )
    head = re.match(r"\s*([\w.$]+)\s+(required|requisite|sufficient|optional)\b", text)
    if head is None:
        raise bad
    options, rest = {}, text[head.end() :]
    while True:
        found = _JAAS_OPTION.match(rest)
        if found is None:
            break
        value = found.group(2)
        if value.startswith('"'):
            value = re.sub(r"\\(.)", r"\1", value[1:-1])
        options[found.group(1)] = value
        rest = rest[found.end() :]
    if rest.strip() != ";":
        raise bad
    return Jaas(head.group(1), options)


# --- the settings of one deployment ----------------------------------------------------------------


@dataclass(frozen=True)
class ClientProperties:
    """The client settings of a connection: where they came from, and what the renderings translate.

    Tuples, not dicts: hashable and picklable as they are (Spark ships the connection to executors,
    who read no file). Secret values are :class:`~ballast.settings.Secret`.
    """

    file: str = ""  # the --kafka-config file, absolute ("" none): what a child process is given
    given: tuple[tuple[str, str], ...] = ()  # -X / BALLAST_KAFKA_PROPERTIES entries, sorted by key
    entries: tuple[tuple[str, str], ...] = ()  # file then given, without the lifted ones
    lifted: tuple[tuple[str, str], ...] = ()  # (KafkaConnection field, value) the entries set

    @classmethod
    def load(cls, file: str = "", given: Iterable[tuple[str, str]] = ()) -> ClientProperties:
        """Read ``file`` (Java properties), add ``given`` (later wins), refuse Ballast's own keys."""
        merged: dict[str, tuple[str, str]] = {}  # key -> (value, where it came from)
        path = os.path.abspath(file) if file else ""
        if path:
            try:
                text = Path(path).read_text()
            except OSError as exc:
                raise ClientSettingError(f"--kafka-config {file}: cannot read it: {exc.strerror}") from None
            for key, value in parse_properties(text, f"--kafka-config {file}"):
                merged[key] = (value, f"--kafka-config {file}")
        given = tuple(sorted(dict(given).items()))
        for key, value in given:
            merged[key] = (value, "-X/BALLAST_KAFKA_PROPERTIES")
        for key, (_, source) in merged.items():
            name = split_key(key)[1]
            if name in OWNED:
                raise ClientSettingError(f"{key} (from {source}): Ballast sets it itself, {OWNED[name]}")
        values = {k: (Secret(v) if is_secret(k) else v) for k, (v, _) in merged.items()}
        lifted, rest = lift(values)
        given = tuple((k, Secret(v) if is_secret(k) else v) for k, v in given)
        return cls(path, given, tuple(rest.items()), tuple(lifted.items()))

    @classmethod
    def of(cls, entries: Mapping[str, str]) -> ClientProperties:
        """Settings given in code (tests): as if by ``-X``."""
        return cls.load(given=entries.items())

    def __bool__(self) -> bool:
        return bool(self.entries or self.lifted)

    def as_dict(self) -> dict[str, str]:
        return dict(self.entries)

    def describe(self) -> str:
        """The keys and where they came from, never a value: for a log line."""
        by_field = {name: key for key, name in LIFTED.items()}
        keys = sorted({k for k, _ in self.entries} | {by_field[f] for f, _ in self.lifted})
        where = f" from {self.file}" if self.file else ""
        return f"client settings{where}: {', '.join(keys)}" if keys else ""


def lift(values: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(connection fields the unprefixed connection keys fill, the other entries); see the module
    docstring. A PEM truststore fills the CA file; a PLAIN/SCRAM JAAS line the username and password."""
    lifted: dict[str, str] = {}
    rest = dict(values)
    for key, name in LIFTED.items():
        if key in rest:
            lifted[name] = rest.pop(key)
    truststore_type = str(rest.get("ssl.truststore.type", "")).upper()
    if truststore_type == "PEM" and "ssl.truststore.location" in rest:
        if "ssl_ca_location" in lifted:
            raise ClientSettingError("ssl.truststore.location and ssl.ca.location both name the CA: give one")
        lifted["ssl_ca_location"] = rest.pop("ssl.truststore.location")
        rest.pop("ssl.truststore.type")
    if "sasl.jaas.config" in rest:
        jaas = parse_jaas(rest["sasl.jaas.config"])
        if jaas.module in PASSWORD_MODULES:
            _lift_password_jaas(jaas, lifted)
            del rest["sasl.jaas.config"]
    return {k: Secret(v) if k in SECRET_FIELDS else v for k, v in lifted.items()}, rest


def _lift_password_jaas(jaas: Jaas, lifted: dict[str, str]) -> None:
    extra = sorted(set(jaas.options) - {"username", "password"})
    if extra:
        raise ClientSettingError(
            f"sasl.jaas.config: {jaas.short} options other than username and password ({', '.join(extra)}) "
            "cannot be carried to librdkafka and faust; give it as java.sasl.jaas.config for Spark only"
        )
    if not {"username", "password"} <= set(jaas.options):
        raise ClientSettingError(f"sasl.jaas.config: {jaas.short} needs a username and a password")
    for name, option in (("sasl_username", "username"), ("sasl_password", "password")):
        if name in lifted and lifted[name] != jaas.options[option]:
            raise ClientSettingError(f"sasl.jaas.config and sasl.{option} disagree on the SASL {option}")
        lifted[name] = jaas.options[option]
    mechanism = lifted.get("sasl_mechanism")
    if mechanism and mechanism not in PASSWORD_MODULES[jaas.module]:
        raise ClientSettingError(f"sasl.jaas.config: {jaas.short} does not log in with {mechanism}")


def merge_fields(given: Mapping[str, object], props: ClientProperties) -> dict[str, object]:
    """The connection fields: ``given`` (flags, environment; a default counts as not given) with the
    ones ``props`` lifted; the same setting given both ways must agree."""
    merged = dict(given)
    for name, value in props.lifted:
        have = merged.get(name)
        if have and have != value:
            shown = "" if name in SECRET_FIELDS else f" ({have} and {value})"
            key = next(k for k, f in LIFTED.items() if f == name)
            flag = "--bootstrap" if name == "bootstrap_servers" else f"--{name.replace('_', '-')}"
            raise ClientSettingError(
                f"{key} is given twice, by {flag} (or its variable) and by the client settings, "
                f"and they disagree{shown}"
            )
        merged[name] = value
    return merged
