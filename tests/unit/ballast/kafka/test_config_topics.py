"""Pure logic of the typed client config and the topic declarations (no broker)."""

from __future__ import annotations

import dataclasses

import pytest

from ballast.kafka.configuration import KafkaConfig
from ballast.kafka.topics import ROLES, TopicLayout, TopicSpec, find_conflicts


def test_config_is_immutable_and_renders_librdkafka_keys():
    cfg = KafkaConfig.plaintext("127.0.0.1:1")
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.acks = "1"  # type: ignore[misc]
    prod = cfg.producer()
    assert prod["bootstrap.servers"] == "127.0.0.1:1"
    assert prod["partitioner"] == "murmur2_random"  # Java's partitioner, not librdkafka's CRC32 default
    assert prod["enable.idempotence"] is True and prod["acks"] == "all"
    cons = cfg.consumer("g")
    assert cons["isolation.level"] == "read_committed" and cons["enable.auto.commit"] is False


def test_overrides_win_and_cannot_be_mutated():
    cfg = KafkaConfig().with_overrides(linger_ms=50, **{"socket.timeout.ms": 1000})
    assert cfg.producer()["linger.ms"] == 50
    assert cfg.consumer("g")["socket.timeout.ms"] == 1000
    with pytest.raises(TypeError):
        cfg.overrides["x"] = 1  # type: ignore[index]


def test_every_client_logs_through_python_logging():
    cfg = KafkaConfig.plaintext("127.0.0.1:1")
    for conf in (cfg.producer(), cfg.consumer("g"), cfg.admin()):
        assert conf["logger"].name == "ballast.librdkafka"


def test_layout_declares_every_role_with_its_invariants():
    specs = TopicLayout(prefix="p", workers=12).specs()
    assert set(specs) == set(ROLES)
    assert specs["routed"].partitions == 12
    assert specs["control"].partitions == 1
    assert specs["control"].config["retention.ms"] == "-1"
    assert len({s.name for s in specs.values()}) == len(specs)


def test_find_conflicts_reports_each_difference():
    spec = TopicSpec("control", "c", 1, {"retention.ms": "-1"})
    assert find_conflicts(spec, 1, {"retention.ms": "-1", "other": "x"}) == []
    problems = find_conflicts(spec, 3, {"retention.ms": "604800000"})
    assert len(problems) == 2
    assert "3 partitions" in problems[0] and "retention.ms" in problems[1]


def test_topic_spec_rejects_zero_partitions():
    with pytest.raises(ValueError):
        TopicSpec("x", "x", 0)


def test_cluster_ids_never_look_like_options():
    from ballast.devstack.brokers import new_cluster_id as _new_cluster_id

    ids = [_new_cluster_id() for _ in range(3000)]  # about 1 in 64 raw ids starts with "-"
    assert all(len(i) == 22 and not i.startswith("-") for i in ids)
