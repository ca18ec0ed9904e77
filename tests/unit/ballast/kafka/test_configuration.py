"""One connection, three renderings: a SASL setting and a pass-through client setting (``-X``)
reach librdkafka, Spark and faust, and no rendering, repr or child-process argv shows the password."""

from __future__ import annotations

import argparse
import pickle

import pytest

from ballast.cli.connection import ConnectionSettings
from ballast.kafka.configuration import ClientTuning, KafkaConfig, KafkaConnection
from ballast.settings import Secret, SettingsError

PASSWORD = 's3cr3t-"quoted"\\pw'  # quotes and a backslash: the JAAS rendering must escape both
ENV = {
    "BALLAST_BOOTSTRAP_SERVERS": "b1:9093,b2:9093",
    "BALLAST_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
    "BALLAST_SASL_MECHANISM": "SCRAM-SHA-512",
    "BALLAST_SASL_USERNAME": "alice",
    "BALLAST_SASL_PASSWORD": PASSWORD,
    # a client setting beyond the flags, by its Java name: passed through to every client family
    "BALLAST_KAFKA_PROPERTIES": "request.timeout.ms=45000",
}


def sasl_config() -> KafkaConfig:
    """From the environment, the way every command reads it (flags work the same way)."""
    return ConnectionSettings.from_args(None, env=ENV).kafka_config("client-x")


def test_one_sasl_setting_reaches_librdkafka():
    cfg = sasl_config()
    for conf in (cfg.producer(), cfg.consumer("g"), cfg.admin()):
        assert conf["bootstrap.servers"] == "b1:9093,b2:9093"
        assert conf["security.protocol"] == "SASL_PLAINTEXT"
        assert conf["sasl.mechanism"] == "SCRAM-SHA-512"
        assert (conf["sasl.username"], str(conf["sasl.password"])) == ("alice", PASSWORD)
        assert conf["request.timeout.ms"] == "45000"


def test_one_sasl_setting_reaches_spark_source_sink_and_executors():
    cfg = sasl_config()
    jaas = (
        'org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" '
        'password="s3cr3t-\\"quoted\\"\\\\pw";'
    )
    for options in (cfg.spark_source_options(), cfg.spark_sink_options()):
        assert options["kafka.bootstrap.servers"] == "b1:9093,b2:9093"
        assert options["kafka.security.protocol"] == "SASL_PLAINTEXT"
        assert options["kafka.sasl.mechanism"] == "SCRAM-SHA-512"
        assert str(options["kafka.sasl.jaas.config"]) == jaas
        assert options["kafka.request.timeout.ms"] == "45000"
    assert cfg.spark_source_options()["kafka.isolation.level"] == "read_committed"
    sink = cfg.spark_sink_options()
    assert (sink["kafka.acks"], sink["kafka.enable.idempotence"]) == ("all", "true")
    # the executors get the driver's whole config (pickled with the job), credentials included
    shipped = pickle.loads(pickle.dumps(cfg))
    assert shipped == cfg and str(shipped.connection.sasl_password) == PASSWORD
    assert shipped.consumer("c")["sasl.username"] == "alice"


def test_one_sasl_setting_reaches_faust():
    pytest.importorskip("faust")
    settings = sasl_config().connection.faust()
    assert settings["broker"] == "kafka://b1:9093;kafka://b2:9093"
    creds = settings["broker_credentials"]
    assert (creds.username, creds.password) == ("alice", PASSWORD)
    assert creds.mechanism.value == "SCRAM-SHA-512" and creds.protocol.value == "SASL_PLAINTEXT"
    # aiokafka's request timeout is in seconds, set for faust's consumer and producer alike
    assert (settings["broker_request_timeout"], settings["producer_request_timeout"]) == (45.0, 45.0)


def test_no_rendering_prints_the_password():
    cfg = sasl_config()
    settings = ConnectionSettings.from_args(None, env=ENV)
    shown = [
        repr(cfg),
        str(cfg),
        repr(cfg.connection),
        cfg.connection.describe(),
        repr(settings),
        repr(cfg.producer()),
        repr(cfg.consumer("g")),
        repr(cfg.admin()),
        repr(cfg.spark_source_options()),
        repr(cfg.spark_sink_options()),
        repr(cfg.connection.java()),
        " ".join(settings.to_argv()),
    ]
    if pytest.importorskip("faust"):
        shown += [repr(cfg.connection.faust()), str(cfg.connection.faust())]
    leaked = [text for text in shown if "s3cr3t" in text]
    assert not leaked, leaked
    assert "'***'" in repr(cfg.connection)


def test_a_child_process_gets_the_secret_through_its_environment_only():
    settings = ConnectionSettings.from_args(None, env=ENV)
    argv = settings.to_argv()
    assert "--sasl-password" not in argv and "--sasl-username" in argv
    env = settings.secret_env()
    assert env == {"BALLAST_SASL_PASSWORD": PASSWORD}
    assert argv[-2:] == ["-X", "request.timeout.ms=45000"]  # a plain client setting is a flag
    parser = argparse.ArgumentParser()
    ConnectionSettings.add_arguments(parser)
    again = ConnectionSettings.from_args(parser.parse_args(argv), env=env)
    assert again.kafka_config("client-x") == settings.kafka_config("client-x")


def test_of_gives_a_config_back_as_settings():
    cfg = sasl_config()
    assert ConnectionSettings.of(cfg).kafka_config("client-x") == cfg


def test_tls_renders_files_for_librdkafka_and_pem_for_java(tmp_path):
    ca, cert, key = (tmp_path / n for n in ("ca.pem", "cert.pem", "key.pem"))
    ca.write_text("CA")
    cert.write_text("-----BEGIN CERTIFICATE-----\nC\n-----END CERTIFICATE-----\n")
    key.write_text("-----BEGIN PRIVATE KEY-----\nK\n-----END PRIVATE KEY-----\n")
    conn = KafkaConnection(
        "b:9094",
        security_protocol="SSL",
        ssl_ca_location=str(ca),
        ssl_certificate_location=str(cert),
        ssl_key_location=str(key),
        ssl_key_password="kp",
    )
    lib = conn.librdkafka()
    assert (lib["ssl.ca.location"], lib["ssl.certificate.location"], lib["ssl.key.location"]) == (
        str(ca), str(cert), str(key),
    )  # fmt: skip
    java = conn.java()
    assert (java["ssl.truststore.type"], java["ssl.truststore.location"]) == ("PEM", str(ca))
    assert java["ssl.keystore.certificate.chain"] == cert.read_text()
    assert str(java["ssl.keystore.key"]) == key.read_text() and "PRIVATE" not in repr(java)
    assert str(java["ssl.key.password"]) == "kp" and "kp" not in repr(conn)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"BALLAST_SECURITY_PROTOCOL": "SASL_SSL"}, "needs a SASL mechanism"),
        (
            {"BALLAST_SECURITY_PROTOCOL": "SASL_SSL", "BALLAST_SASL_MECHANISM": "PLAIN"},
            "username and password",
        ),
        ({"BALLAST_SASL_USERNAME": "bob"}, "security protocol is PLAINTEXT"),
        ({"BALLAST_SSL_CA_LOCATION": "/ca.pem"}, "TLS files given"),
        (
            {"BALLAST_SECURITY_PROTOCOL": "SSL", "BALLAST_SSL_CERTIFICATE_LOCATION": "/c.pem"},
            "needs its key",
        ),
        ({"BALLAST_SASL_MECHANISM": "AWS_MSK_IAM"}, "BALLAST_SASL_MECHANISM"),
        ({"BALLAST_SASL_MECHANISM": "GSSAPI"}, "security protocol is PLAINTEXT"),
        (
            {
                "BALLAST_SECURITY_PROTOCOL": "SASL_SSL",
                "BALLAST_SASL_MECHANISM": "OAUTHBEARER",
                "BALLAST_SASL_USERNAME": "bob",
            },
            "OAUTHBEARER takes no SASL username or password",
        ),
    ],
)
def test_contradictory_security_settings_are_a_usage_error(env, message):
    with pytest.raises(SettingsError, match=message):
        ConnectionSettings.from_args(None, env=env)


def test_plaintext_renders_no_security_keys_and_tuning_is_separate():
    cfg = KafkaConfig.plaintext("127.0.0.1:1")
    assert "security.protocol" not in cfg.producer() and "sasl.username" not in cfg.consumer("g")
    assert cfg.connection == KafkaConnection("127.0.0.1:1") and cfg.tuning == ClientTuning()
    assert Secret("") == "" and repr(Secret("")) == "''"
