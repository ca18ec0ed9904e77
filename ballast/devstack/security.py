"""A secured local stack's material: a CA, the brokers' certificate, and one SCRAM user per service.

Why made here, at start-up, with Python's ``cryptography``: nothing may be fetched, and a test
session or ``ballast stack up --secure`` must get a fresh, private cluster in seconds. Everything
lives in ``<state>/security/`` (mode 0700; keys and passwords 0600) and never on a command line:
services get their password through ``BALLAST_SASL_PASSWORD_FILE``.

How the brokers authenticate (decisions, docs/security.md):

* clients use SASL_SSL with SCRAM-SHA-512 (the ``CLIENT`` listener); each service kind has its own
  principal (:data:`SERVICE_USERS`), ``admin`` is a super-user;
* brokers talk to each other and to the KRaft controllers over TLS with client certificates
  (``INTERNAL`` and ``CONTROLLER`` listeners, principal ``User:CN=ballast-broker``, a super-user).
  Not SCRAM: SCRAM users live in the cluster's metadata, so the first one would have to be put
  there by ``kafka-storage format --add-scram``, with its password on that command line;
* the stack's own tooling creates the SCRAM users through the ``INTERNAL`` listener with the
  brokers' certificate, so no password is ever handed to a JVM or a command line.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import secrets
from pathlib import Path
from typing import Any

from ballast.devstack.state import SCRAM_MECHANISM, SecurityState, StackError, StackState
from ballast.kafka.configuration import KafkaConfig, KafkaConnection
from ballast.settings import Secret

SECURITY_DIR = "security"
MECHANISM = SCRAM_MECHANISM
ADMIN_USER = "admin"
# one SCRAM principal per kind of service (docs/security.md has what each may do)
SERVICE_USERS = ("router", "controller", "reduce", "shedder", "connect")
BROKER_CN = "ballast-broker"
BROKER_PRINCIPAL = f"User:CN={BROKER_CN}"
SCRAM_ITERATIONS = 8192
_VALID_DAYS = 365


def _private(path: Path, data: bytes) -> None:
    """Write ``data`` readable by its owner only, from the first byte on."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)


def _name(common_name: str) -> Any:
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _certificates(folder: Path, addresses: tuple[str, ...]) -> tuple[bytes, bytes, bytes]:
    """(CA certificate, broker certificate, broker key), PEM: a CA of this stack signs the broker's."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID

    now = datetime.datetime.now(datetime.UTC)
    start, end = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=_VALID_DAYS)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name(f"Ballast local stack CA {folder.parent.name}")
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(BROKER_CN))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost")] + [x509.IPAddress(ipaddress.ip_address(a)) for a in addresses]
            ),
            critical=False,
        )
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    key_pem = key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    # the CA's key is not kept: nothing signs again (a new stack gets a new CA)
    return ca_cert.public_bytes(pem), cert.public_bytes(pem), key_pem


def make_security(
    state_dir: Path,
    users: tuple[str, ...] = (ADMIN_USER, *SERVICE_USERS),
    addresses: tuple[str, ...] = ("127.0.0.1",),
) -> SecurityState:
    """The material of a new secured stack in ``<state_dir>/security`` (an existing one is kept);
    the brokers' certificate is valid for ``addresses``."""
    folder = state_dir / SECURITY_DIR
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
    security = SecurityState(
        folder=str(folder),
        ca=str(folder / "ca.pem"),
        broker_cert=str(folder / "broker.pem"),
        broker_key=str(folder / "broker-key.pem"),
        broker_keystore=str(folder / "broker-keystore.pem"),
        users=list(users),
    )
    if not Path(security.broker_keystore).exists():
        ca, cert, key = _certificates(folder, addresses)
        Path(security.ca).write_bytes(ca)
        Path(security.broker_cert).write_bytes(cert + ca)
        _private(Path(security.broker_key), key)
        _private(Path(security.broker_keystore), key + cert + ca)
    for user in users:
        path = folder / f"{user}.password"
        if not path.exists():
            _private(path, secrets.token_urlsafe(24).encode())
    return security


def create_users(security: SecurityState, bootstrap_internal: str, timeout: float = 60.0) -> None:
    """Create (or reset) every user's SCRAM credential, as the brokers' own identity (mTLS)."""
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient(security.internal_conf(bootstrap_internal) | {"log_level": 0})
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, SCRAM_ITERATIONS)
    upserts = [
        UserScramCredentialUpsertion(user, info, security.password(user).encode()) for user in security.users
    ]
    for future in admin.alter_user_scram_credentials(upserts, request_timeout=timeout).values():
        future.result()  # raises with the broker's reason


def stack_connection(state: StackState, user: str) -> KafkaConnection:
    """How ``user`` connects to a secured stack: SASL_SSL, SCRAM, the stack's CA."""
    if state.security is None:
        raise StackError(f"the stack in {state.state_dir} is not secured: it has no users")
    sec = state.security
    return KafkaConnection(
        bootstrap_servers=state.bootstrap,
        security_protocol="SASL_SSL",
        sasl_mechanism=sec.mechanism,
        sasl_username=user,
        sasl_password=Secret(sec.password(user)),
        ssl_ca_location=sec.ca,
    )


def stack_admin(state: StackState, client_id: str) -> KafkaConfig:
    """The stack's own clients: as admin on a secured stack, plain on an open one."""
    if state.security is None:
        return KafkaConfig.plaintext(state.bootstrap, client_id)
    return KafkaConfig(stack_connection(state, ADMIN_USER), client_id)


def service_configs(state: StackState, client_id: str) -> dict[str, KafkaConfig]:
    """Each service kind's own connection on a secured stack (empty on an open one: all share one)."""
    if state.security is None:
        return {}
    return {kind: KafkaConfig(stack_connection(state, kind), client_id) for kind in SERVICE_USERS}


def service_env(state: StackState, user: str) -> dict[str, str]:
    """The environment that makes a service connect as ``user``: its password by file, never by value."""
    if state.security is None:
        return {}
    sec = state.security
    return {
        "BALLAST_SECURITY_PROTOCOL": "SASL_SSL",
        "BALLAST_SASL_MECHANISM": sec.mechanism,
        "BALLAST_SASL_USERNAME": user,
        "BALLAST_SASL_PASSWORD_FILE": sec.password_file(user),
        "BALLAST_SSL_CA_LOCATION": sec.ca,
    }
