"""Any other client setting: the properties file, the translation table for librdkafka, Java and
faust, the refusals (Ballast's own keys, keys a family cannot express), secrets, and the round trip
to a child process. Expected renderings are written out by hand from the clients' documentation."""

from __future__ import annotations

import argparse
import pickle

import pytest

from ballast.cli.connection import ConnectionSettings
from ballast.kafka import property_table
from ballast.kafka.configuration import KafkaConfig, KafkaConnection
from ballast.kafka.properties import (
    ClientProperties,
    ClientSettingError,
    is_secret,
    parse_jaas,
    parse_properties,
)
from ballast.settings import Secret, SettingsError

SECRET = "pa55-w0rd"


def props(**entries: str) -> ClientProperties:
    return ClientProperties.of({k.replace("__", "."): v for k, v in entries.items()})


def conn(entries: dict[str, str], **fields) -> KafkaConnection:
    return KafkaConnection("b:9093", properties=ClientProperties.of(entries), **fields)


def settings(tmp_path, text: str, *, argv: tuple[str, ...] = (), env: dict[str, str] | None = None):
    """ConnectionSettings as a command reads them: a --kafka-config file, flags and environment."""
    path = tmp_path / "client.properties"
    path.write_text(text)
    parser = argparse.ArgumentParser()
    ConnectionSettings.add_arguments(parser)
    args = parser.parse_args(["--kafka-config", str(path), *argv])
    return ConnectionSettings.from_args(args, env={"BALLAST_BOOTSTRAP_SERVERS": "b:9093", **(env or {})})


# --- the file format ------------------------------------------------------------------------------------


def test_java_properties_syntax():
    text = (
        "# comment\n! also a comment\n\n"
        "a.b=1\n"
        "c.d : two words \n"
        "e.f   spaced\n"
        "long.value=one,\\\n    two\n"
        "esc=tab\\there\\u0041\\\\\n"
        "empty=\n"
    )
    assert parse_properties(text, "f") == [
        ("a.b", "1"),
        ("c.d", "two words "),  # Java keeps trailing blanks of a value
        ("e.f", "spaced"),
        ("long.value", "one,two"),
        ("esc", "tab\thereA\\"),
        ("empty", ""),
    ]


def test_a_jaas_line_reads_module_and_options_and_a_bad_one_never_shows_its_text():
    jaas = parse_jaas('org.x.ScramLoginModule required username="al ice" password="p\\"w" tokenauth=true;')
    assert jaas.short == "ScramLoginModule"
    assert dict(jaas.options) == {"username": "al ice", "password": 'p"w', "tokenauth": "true"}
    with pytest.raises(ClientSettingError) as bad:
        parse_jaas(f'org.x.ScramLoginModule required password="{SECRET}"')  # no closing ';'
    assert SECRET not in str(bad.value)


@pytest.mark.parametrize(
    ("key", "secret"),
    [
        ("sasl.password", True), ("ssl.key.password", True), ("ssl.keystore.password", True),
        ("sasl.jaas.config", True), ("ssl.keystore.key", True), ("ssl.key.pem", True),
        ("sasl.oauthbearer.client.secret", True), ("java.sasl.jaas.config", True),
        ("librdkafka.sasl.oauthbearer.client.secret", True),
        ("sasl.oauthbearer.assertion.private.key.pem", True),
        ("sasl.oauthbearer.assertion.private.key.passphrase", True),
        ("sasl.oauthbearer.token.endpoint.url", False),
        ("metadata.max.age.ms", False), ("ssl.truststore.location", False), ("sasl.mechanism", False),
        ("ssl.keystore.certificate.chain", False), ("sasl.kerberos.keytab", False),
    ],
)  # fmt: skip
def test_which_keys_hold_secrets(key, secret):
    assert is_secret(key) is secret


# --- the table: one setting, three renderings -------------------------------------------------------


def test_a_common_setting_reaches_all_three_families():
    p = props(metadata__max__age__ms="60000")
    assert property_table.librdkafka(p) == {"metadata.max.age.ms": "60000"}
    assert property_table.java(p) == {"metadata.max.age.ms": "60000"}
    assert property_table.faust(p).settings == {
        "consumer_metadata_max_age_ms": 60000,
        "producer_metadata_max_age_ms": 60000,
    }


def test_renamed_keys_get_each_familys_name_whichever_name_is_given():
    for given in ("fetch.max.wait.ms", "fetch.wait.max.ms"):
        p = ClientProperties.of({given: "50"})
        assert property_table.librdkafka(p) == {"fetch.wait.max.ms": "50"}
        assert property_table.java(p) == {"fetch.max.wait.ms": "50"}


def test_a_family_prefix_gives_a_setting_to_that_family_only_untranslated():
    p = ClientProperties.of({"librdkafka.queue.buffering.max.ms": "5", "java.max.poll.records": "100"})
    assert property_table.librdkafka(p) == {"queue.buffering.max.ms": "5"}
    assert property_table.java(p) == {"max.poll.records": "100"}
    assert property_table.faust(p).settings == {}


LIB, JAVA, FAUST = "librdkafka .*", "the Java client .*", "faust/aiokafka .*"


@pytest.mark.parametrize(
    ("key", "family", "message"),
    [
        ("max.poll.records", "librdkafka", rf"^max.poll.records: {LIB} has no such setting; write java.max"),
        ("socket.keepalive.enable", "java", rf"^socket.keepalive.enable: {JAVA} write librdkafka.socket"),
        ("socket.keepalive.enable", "faust", rf"^socket.keepalive.enable: {FAUST} has no equivalent"),
        ("socket.keepalive.enable", "faust", r"write librdkafka.socket.keepalive.enable to give it"),
        ("client.dns.lookup", "faust", rf"^client.dns.lookup: {FAUST} librdkafka.client.dns.lookup and java"),
        ("session.timeout.ms", "faust", r"^session.timeout.ms: .*faust.* --session-timeout-s"),
        (
            "ssl.cipher.suites",
            "librdkafka",
            r"spell its values differently; give librdkafka.ssl.cipher.suites",
        ),
        ("ssl.cipher.suites", "java", r"spell its values differently"),
    ],
)
def test_a_key_a_family_cannot_express_is_refused_naming_key_and_family(key, family, message):
    with pytest.raises(ClientSettingError, match=message):
        getattr(property_table, family)(ClientProperties.of({key: "x"}))


def test_the_endpoint_check_is_spelled_per_family():
    off = props(ssl__endpoint__identification__algorithm="")
    assert property_table.librdkafka(off) == {"ssl.endpoint.identification.algorithm": "none"}
    assert property_table.java(off) == {"ssl.endpoint.identification.algorithm": ""}
    assert property_table.faust(off).check_hostname is False
    assert (
        property_table.faust(props(ssl__endpoint__identification__algorithm="https")).check_hostname is True
    )


def test_keystores_become_what_librdkafka_and_python_read_or_are_refused():
    p12 = ClientProperties.of({
        "ssl.keystore.type": "PKCS12", "ssl.keystore.location": "/k.p12", "ssl.keystore.password": SECRET,
    })  # fmt: skip
    assert property_table.librdkafka(p12) == {
        "ssl.keystore.location": "/k.p12",
        "ssl.keystore.password": SECRET,
    }
    assert property_table.java(p12)["ssl.keystore.type"] == "PKCS12"
    with pytest.raises(ClientSettingError, match=r"^ssl.keystore.location: faust/aiokafka"):
        property_table.faust(p12)  # Python's ssl module reads no PKCS12
    pem = props(ssl__keystore__type="PEM", ssl__keystore__location="/both.pem")
    assert property_table.librdkafka(pem) == {
        "ssl.certificate.location": "/both.pem",
        "ssl.key.location": "/both.pem",
    }
    assert property_table.faust(pem).certfile == "/both.pem"
    jks = props(ssl__keystore__location="/k.jks")  # Java's default type: JKS
    with pytest.raises(ClientSettingError, match=r"^ssl.keystore.location: a JKS keystore, but librdkafka"):
        property_table.librdkafka(jks)


def test_a_jks_truststore_is_java_only_and_a_pem_one_is_the_connections_ca():
    jks = props(ssl__truststore__location="/t.jks", ssl__truststore__password=SECRET)
    assert property_table.java(jks)["ssl.truststore.location"] == "/t.jks"
    with pytest.raises(ClientSettingError, match=r"^ssl.truststore.location: a JKS truststore.*PEM only"):
        property_table.librdkafka(jks)
    pem = props(ssl__truststore__type="PEM", ssl__truststore__location="/ca.pem")
    assert pem.entries == () and dict(pem.lifted) == {"ssl_ca_location": "/ca.pem"}


def test_an_oidc_jaas_line_becomes_librdkafkas_oidc_settings():
    jaas = (
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
        f'clientId="ballast" clientSecret="{SECRET}" scope="kafka";'
    )
    handler = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"
    p = ClientProperties.of({
        "sasl.jaas.config": jaas, "sasl.login.callback.handler.class": handler,
        "sasl.oauthbearer.token.endpoint.url": "https://idp/token",
    })  # fmt: skip
    assert property_table.librdkafka(p) == {
        "sasl.oauthbearer.method": "oidc",
        "sasl.oauthbearer.client.id": "ballast",
        "sasl.oauthbearer.client.secret": SECRET,
        "sasl.oauthbearer.scope": "kafka",
        "sasl.oauthbearer.token.endpoint.url": "https://idp/token",
    }
    assert str(property_table.java(p)["sasl.jaas.config"]) == jaas  # Java takes its own line as it is
    assert SECRET not in repr(property_table.librdkafka(p)) and SECRET not in repr(p)
    c = KafkaConnection("b:1", "SASL_SSL", "OAUTHBEARER", properties=p)
    assert c.librdkafka()["sasl.mechanism"] == "OAUTHBEARER" and "sasl.username" not in c.librdkafka()
    pytest.importorskip("faust")
    with pytest.raises(ClientSettingError, match="OAUTHBEARER: faust/aiokafka"):
        c.faust()


def test_a_kerberos_jaas_line_becomes_librdkafkas_keytab_and_principal():
    jaas = (
        "com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true storeKey=true "
        'keyTab="/etc/k.keytab" principal="ballast@EXAMPLE.COM";'
    )
    p = ClientProperties.of({"sasl.jaas.config": jaas, "sasl.kerberos.service.name": "kafka"})
    assert property_table.librdkafka(p) == {
        "sasl.kerberos.keytab": "/etc/k.keytab",
        "sasl.kerberos.principal": "ballast@EXAMPLE.COM",
        "sasl.kerberos.service.name": "kafka",
    }


def test_a_login_librdkafka_cannot_express_is_refused():
    p = props(sasl__jaas__config="com.example.CustomLoginModule required;")
    with pytest.raises(ClientSettingError, match=r"^sasl.jaas.config: librdkafka .* CustomLoginModule"):
        property_table.librdkafka(p)
    handler = props(sasl__login__callback__handler__class="com.example.Handler")
    with pytest.raises(
        ClientSettingError, match=r"^sasl.login.callback.handler.class: librdkafka .* loads no Java"
    ):
        property_table.librdkafka(handler)


# --- Ballast's own settings --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "entry",
    ["enable.auto.commit=true", "isolation.level=read_uncommitted", "transactional.id=x", "group.id=g",
     "partitioner=consistent", "acks=1", "librdkafka.enable.idempotence=false", "java.partitioner.class=X"],
)  # fmt: skip
def test_ballasts_own_settings_are_refused_from_flags_and_the_file(tmp_path, entry):
    key = entry.split("=")[0]
    with pytest.raises(SettingsError, match=rf"^{key} \(from -X/BALLAST_KAFKA_PROPERTIES\): Ballast sets it"):
        settings(tmp_path, "", argv=("-X", entry))
    with pytest.raises(SettingsError, match=rf"^{key} \(from --kafka-config .*client.properties\): Ballast"):
        settings(tmp_path, entry + "\n")


def test_settings_come_after_tuning_and_cannot_undo_the_invariants():
    cfg = KafkaConfig(conn({"linger.ms": "20", "compression.type": "zstd"}))
    producer, consumer = cfg.producer(), cfg.consumer("g")
    assert (producer["linger.ms"], producer["compression.type"]) == ("20", "zstd")  # the user's, not tuning's
    assert (producer["acks"], producer["enable.idempotence"], producer["partitioner"]) == (
        "all",
        True,
        "murmur2_random",
    )
    assert (consumer["enable.auto.commit"], consumer["isolation.level"]) == (False, "read_committed")
    sink = cfg.spark_sink_options()
    assert (sink["kafka.linger.ms"], sink["kafka.compression.type"], sink["kafka.acks"]) == (
        "20",
        "zstd",
        "all",
    )


# --- the connection keys of a Kafka tool's file ------------------------------------------------------

TOOL_FILE = f"""# the file Kafka's own tools take as --command-config
security.protocol=SASL_SSL
sasl.mechanism=SCRAM-SHA-512
sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\
    username="alice" password="{SECRET}";
ssl.truststore.type=PEM
ssl.truststore.location=/etc/kafka/ca.pem
metadata.max.age.ms=60000
"""


def test_a_kafka_tools_file_works_as_it_is(tmp_path):
    cfg = settings(tmp_path, TOOL_FILE).kafka_config("c")
    c = cfg.connection
    assert (c.security_protocol, c.sasl_mechanism, c.sasl_username, str(c.sasl_password)) == (
        "SASL_SSL", "SCRAM-SHA-512", "alice", SECRET,
    )  # fmt: skip
    lib = cfg.producer()
    assert (lib["sasl.username"], str(lib["sasl.password"]), lib["ssl.ca.location"]) == (
        "alice",
        SECRET,
        "/etc/kafka/ca.pem",
    )
    assert lib["metadata.max.age.ms"] == "60000"
    spark = cfg.spark_source_options()
    assert str(spark["kafka.sasl.jaas.config"]) == (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="alice" password="{SECRET}";'
    )
    assert (spark["kafka.ssl.truststore.type"], spark["kafka.ssl.truststore.location"]) == (
        "PEM",
        "/etc/kafka/ca.pem",
    )
    assert spark["kafka.metadata.max.age.ms"] == "60000"


def test_a_setting_given_by_flag_and_file_must_agree(tmp_path):
    same = settings(tmp_path, TOOL_FILE, argv=("--security-protocol", "SASL_SSL", "--sasl-username", "alice"))
    assert same.connection().sasl_username == "alice"
    with pytest.raises(
        SettingsError, match=r"^security.protocol is given twice.*disagree \(SSL and SASL_SSL\)"
    ):
        settings(tmp_path, TOOL_FILE, argv=("--security-protocol", "SSL"))
    with pytest.raises(SettingsError, match=r"^sasl.password is given twice.*disagree$"):  # no value shown
        settings(tmp_path, TOOL_FILE, env={"BALLAST_SASL_PASSWORD": "other"})


def test_the_files_bootstrap_servers_apply_when_no_flag_gives_them(tmp_path):
    (tmp_path / "c.properties").write_text("bootstrap.servers=k1:9092,k2:9092\n")
    s = ConnectionSettings.from_args(None, env={"BALLAST_KAFKA_CONFIG": str(tmp_path / "c.properties")})
    assert s.kafka_config().bootstrap_servers == "k1:9092,k2:9092"
    with pytest.raises(SettingsError, match=r"^bootstrap.servers is given twice, by --bootstrap \(or its"):
        settings(tmp_path, "bootstrap.servers=k1:9092\n")  # the helper gives b:9093 by its variable


def test_an_unreadable_file_is_a_usage_error(tmp_path):
    with pytest.raises(SettingsError, match=r"^--kafka-config /nonexistent/c.properties: cannot read it"):
        ConnectionSettings.from_args(None, env={"BALLAST_KAFKA_CONFIG": "/nonexistent/c.properties"})


# --- secrets -------------------------------------------------------------------------------------------


def test_no_secret_of_the_settings_is_printed(tmp_path):
    text = TOOL_FILE + f"librdkafka.ssl.keystore.password={SECRET}\n"
    s = settings(tmp_path, text, argv=("-X", "request.timeout.ms=45000"),
                 env={"BALLAST_KAFKA_PROPERTIES": f"java.ssl.keystore.password={SECRET}"})  # fmt: skip
    cfg = s.kafka_config("c")
    shown = [
        repr(s), repr(cfg), cfg.connection.describe(), repr(cfg.producer()), repr(cfg.spark_sink_options()),
        repr(cfg.connection.properties), " ".join(s.to_argv()),
    ]  # fmt: skip
    assert not [text for text in shown if SECRET in text]
    assert "metadata.max.age.ms" in cfg.connection.describe()  # the keys are shown, never the values


def test_a_secret_is_refused_as_a_flag(tmp_path):
    with pytest.raises(
        SettingsError, match=r"^-X sasl.jaas.config: a secret in a flag shows in `ps`.*--kafka-config file$"
    ):
        settings(tmp_path, "", argv=("-X", f"sasl.jaas.config=x required password={SECRET};"))


def test_a_jaas_line_with_more_than_a_username_and_password_is_refused_without_showing_it(tmp_path):
    text = (
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="a" password="{SECRET}" tokenauth="true";\n'
    )
    with pytest.raises(
        SettingsError, match="options other than username and password \\(tokenauth\\)"
    ) as err:
        settings(tmp_path, text)
    assert SECRET not in str(err.value)


# --- to a child process and to executors ------------------------------------------------------------


def test_a_child_gets_the_files_path_the_entries_and_no_file_contents(tmp_path):
    s = settings(
        tmp_path, TOOL_FILE, argv=("-X", "request.timeout.ms=45000"),
        env={"BALLAST_KAFKA_PROPERTIES": f"librdkafka.ssl.keystore.password={SECRET}-2"},
    )  # fmt: skip
    cfg = s.kafka_config("c")
    child = ConnectionSettings.of(cfg, tmp_path)
    argv, env = child.to_argv(), child.secret_env()
    assert argv[argv.index("--kafka-config") + 1] == str(tmp_path / "client.properties")
    assert "-X" in argv and "request.timeout.ms=45000" in argv
    # the file's connection keys stay in the file: neither its user nor its password travel
    assert "alice" not in argv and argv[argv.index("--security-protocol") + 1] == "PLAINTEXT"
    assert env == {"BALLAST_KAFKA_PROPERTIES": f"librdkafka.ssl.keystore.password={SECRET}-2"}
    parser = argparse.ArgumentParser()
    ConnectionSettings.add_arguments(parser)
    again = ConnectionSettings.from_args(parser.parse_args(argv), env=env)
    assert again.kafka_config("c") == cfg


def test_executors_get_the_whole_config_and_read_no_file(tmp_path):
    cfg = settings(tmp_path, TOOL_FILE).kafka_config("c")
    (tmp_path / "client.properties").unlink()  # an executor on another host has no such file
    shipped = pickle.loads(pickle.dumps(cfg))
    assert shipped == cfg and shipped.consumer("g")["metadata.max.age.ms"] == "60000"
    assert isinstance(dict(shipped.connection.properties.lifted)["sasl_password"], Secret)


def test_client_settings_apply_to_the_local_stacks_admin_too(tmp_path):
    from ballast.devstack.state import NodeState, StackState

    node = NodeState(1, 41234, 41235, str(tmp_path / "d"), str(tmp_path / "c"), str(tmp_path / "l"))
    StackState(str(tmp_path), "cid", [node]).save()
    s = ConnectionSettings.from_args(
        None, env={"BALLAST_KAFKA_PROPERTIES": "metadata.max.age.ms=1000"}, state_dir=tmp_path
    )
    assert s.kafka_config().admin()["metadata.max.age.ms"] == "1000"


def test_settings_built_in_code_wrap_their_secret_entries_too():
    s = ConnectionSettings(kafka_properties=(f"librdkafka.ssl.key.password={SECRET}", "linger.ms=20"))
    assert s.to_argv()[-2:] == ["-X", "linger.ms=20"] and SECRET not in " ".join(s.to_argv())
    assert s.secret_env() == {"BALLAST_KAFKA_PROPERTIES": f"librdkafka.ssl.key.password={SECRET}"}


# --- at the broker check: librdkafka's own refusals, in one line -----------------------------------


def test_librdkafkas_refusal_of_a_key_is_one_line_naming_the_settings():
    from ballast.kafka.admin import require_broker

    cfg = KafkaConfig(conn({"max.poll.recordz": "3"}))  # a typo: in no table, so passed to librdkafka
    with pytest.raises(
        ClientSettingError, match=r'No such configuration property: "max.poll.recordz" \(client'
    ):
        require_broker(cfg, timeout=1)


def test_a_missing_file_is_one_line_before_librdkafka_sees_it():
    from ballast.kafka.admin import require_broker

    # with OIDC, librdkafka aborts the process on a CA file that is not there, instead of raising
    oidc = {"librdkafka.sasl.oauthbearer.method": "oidc", "librdkafka.sasl.oauthbearer.client.id": "c",
            "librdkafka.sasl.oauthbearer.client.secret": SECRET,
            "librdkafka.sasl.oauthbearer.token.endpoint.url": "https://idp.invalid/token"}  # fmt: skip
    c = KafkaConnection("127.0.0.1:1", "SASL_SSL", "OAUTHBEARER", ssl_ca_location="/nonexistent/ca.pem",
                        properties=ClientProperties.of(oidc))  # fmt: skip
    with pytest.raises(ClientSettingError, match=r"^ssl.ca.location: no such file: /nonexistent/ca.pem$"):
        require_broker(KafkaConfig(c), timeout=1)
