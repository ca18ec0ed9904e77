"""Any client setting, end to end: a router service started with ``--kafka-config FILE`` and ``-X``
entries (one of them secret) routes every record against the session broker, having read the file
itself; the secret reached it through its environment, never its command line."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from conftest import RouterKit

from ballast.cli.connection import ConnectionSettings
from ballast.workload import input_events

SECRET = "unused-key-pa55word"  # librdkafka keeps it for a TLS key it is never given


def test_a_router_started_with_a_client_settings_file_routes_every_record(
    kafka_config, admin, unique, tmp_path: Path
):
    config = tmp_path / "client.properties"
    config.write_text("# harmless ones\nsocket.keepalive.enable=true\nmetadata.max.age.ms : 30000\n")
    connection = replace(
        ConnectionSettings.of(kafka_config, tmp_path),  # the session's broker, secured or not
        config_file=str(config),
        kafka_properties=("reconnect.backoff.max.ms=2000", f"librdkafka.ssl.key.password={SECRET}"),
    )
    kafka = connection.kafka_config("router-client-settings-test")
    kit = RouterKit(kafka, admin, unique("rt-cs"), tmp_path / "pipe")
    try:
        events = list(input_events(1_000, num_keys=100, z=1.0, seed=5))
        name = kit.start_process("r1")  # the harness hands the connection on as a user's process would
        kit.produce_events(events)
        kit.wait_committed(len(events))
        kit.pipe.stop(name)
        kit.verify(kit.read_routed(len(events)), events, {"r1"})

        argv = kit.pipe.service(name).argv
        assert argv[argv.index("--kafka-config") + 1] == str(config)  # the path, not the contents
        assert "reconnect.backoff.max.ms=2000" in argv and not any(SECRET in a for a in argv)
        # the router read the file and both entries itself (its start line names the keys, no value)
        log = kit.pipe.log(name)
        started = [line for line in log.splitlines() if line.startswith("router r1: bootstrap")]
        assert len(started) == 1, log
        assert (
            f"client settings from {config}: librdkafka.ssl.key.password, metadata.max.age.ms, "
            "reconnect.backoff.max.ms, socket.keepalive.enable" in started[0]
        ), started[0]
        assert SECRET not in log
    finally:
        kit.close()
