"""A secured stack's material (ballast/devstack/security.py) and its brokers' config, without a broker."""

from __future__ import annotations

import ipaddress
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec

from ballast.cli.connection import ConnectionSettings
from ballast.devstack.brokers import plan_nodes, write_broker_config
from ballast.devstack.security import (
    ADMIN_USER,
    BROKER_PRINCIPAL,
    SERVICE_USERS,
    make_security,
    service_env,
    stack_connection,
)
from ballast.devstack.state import StackError, StackState


@pytest.fixture
def secured(tmp_path: Path) -> StackState:
    state = StackState(state_dir=str(tmp_path), cluster_id="c")
    state.nodes = plan_nodes(tmp_path, 1, None, secure=True)
    state.security = make_security(tmp_path)
    return state


def mode(path: str | Path) -> int:
    return stat.S_IMODE(Path(path).stat().st_mode)


def test_keys_and_passwords_are_the_owners_only(secured: StackState) -> None:
    sec = secured.security
    assert sec is not None
    assert mode(sec.folder) == 0o700
    for private in (sec.broker_key, sec.broker_keystore, *(sec.password_file(u) for u in sec.users)):
        assert mode(private) == 0o600, private
    assert set(sec.users) == {ADMIN_USER, *SERVICE_USERS}
    passwords = {sec.password(u) for u in sec.users}
    assert len(passwords) == len(sec.users) and all(len(p) >= 24 for p in passwords)


def test_the_brokers_certificate_is_signed_by_the_stacks_ca_for_loopback(secured: StackState) -> None:
    sec = secured.security
    assert sec is not None
    ca = x509.load_pem_x509_certificate(Path(sec.ca).read_bytes())
    cert = x509.load_pem_x509_certificates(Path(sec.broker_cert).read_bytes())[0]
    key = ca.public_key()
    assert isinstance(key, ec.EllipticCurvePublicKey)
    cert.verify_directly_issued_by(ca)  # raises when another key signed it
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ipaddress.ip_address("127.0.0.1") in names.get_values_for_type(x509.IPAddress)
    assert f"User:{cert.subject.rfc4514_string()}" == BROKER_PRINCIPAL


def test_a_second_start_keeps_the_material(secured: StackState, tmp_path: Path) -> None:
    sec = secured.security
    assert sec is not None
    before = {p.name: p.read_bytes() for p in Path(sec.folder).iterdir()}
    make_security(tmp_path)
    assert {p.name: p.read_bytes() for p in Path(sec.folder).iterdir()} == before


def test_the_broker_config_has_no_open_listener_and_no_password(secured: StackState) -> None:
    node = secured.nodes[0]
    write_broker_config(node, f"1@127.0.0.1:{node.controller_port}", 1, secured.security)
    config = Path(node.config).read_text()
    lines = [line for line in config.splitlines() if "=" in line and not line.startswith("#")]
    props = dict(line.split("=", 1) for line in lines)
    assert props["listener.security.protocol.map"] == "CLIENT:SASL_SSL,INTERNAL:SSL,CONTROLLER:SSL"
    assert "PLAINTEXT" not in props["listeners"] and "PLAINTEXT" not in props["advertised.listeners"]
    assert props["allow.everyone.if.no.acl.found"] == "false"
    assert props["listener.name.internal.ssl.client.auth"] == "required"
    assert props["listener.name.controller.ssl.client.auth"] == "required"
    assert secured.security is not None
    for user in secured.security.users:
        assert secured.security.password(user) not in config


def test_an_open_stacks_broker_config_is_plaintext(tmp_path: Path) -> None:
    node = plan_nodes(tmp_path, 1, None)[0]
    write_broker_config(node, f"1@127.0.0.1:{node.controller_port}", 1)
    config = Path(node.config).read_text()
    assert "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT" in config and "authorizer" not in config


def test_a_service_gets_its_password_by_file_under_the_connection_settings_names(secured: StackState) -> None:
    env = service_env(secured, "router")
    assert set(env) <= set(ConnectionSettings.env_names())
    assert secured.security is not None
    assert secured.security.password("router") not in env.values()
    assert env["BALLAST_SASL_PASSWORD_FILE"] == secured.security.password_file("router")
    conn = stack_connection(secured, "router")
    assert (conn.security_protocol, conn.sasl_username) == ("SASL_SSL", "router")
    assert "***" in repr(conn) and secured.security.password("router") not in repr(conn)


def test_an_open_stack_has_no_users(tmp_path: Path) -> None:
    state = StackState(state_dir=str(tmp_path), cluster_id="c")
    assert service_env(state, "router") == {}
    with pytest.raises(StackError, match="not secured"):
        stack_connection(state, "router")


def test_the_stack_record_keeps_the_security_through_a_save(secured: StackState) -> None:
    secured.save()
    again = StackState.load(secured.state_dir)
    assert again.security == secured.security
    assert again.nodes[0].internal_port == secured.nodes[0].internal_port
    stored = (Path(secured.state_dir) / "stack.json").read_text()
    assert secured.security is not None and secured.security.password(ADMIN_USER) not in stored
