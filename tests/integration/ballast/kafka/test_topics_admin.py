"""Topic creation through the AdminClient: idempotent, and a conflicting topic is a clear error."""

from __future__ import annotations

import pytest

from ballast.kafka.admin import TopicConflictError, ensure_topics
from ballast.kafka.topics import TopicLayout
from ballast.waiting import wait_until


def test_create_is_idempotent_and_applies_config(admin, unique):
    from confluent_kafka.admin import ConfigResource

    layout = TopicLayout(prefix=unique("ballast"), workers=6)
    first = ensure_topics(admin, layout.specs())
    assert set(first.values()) == {"created"}
    second = ensure_topics(admin, layout.specs())
    assert set(second.values()) == {"exists"}
    md = admin.list_topics(timeout=10)
    assert len(md.topics[layout.name("routed")].partitions) == 6
    assert len(md.topics[layout.name("control")].partitions) == 1
    res = ConfigResource("topic", layout.name("control"))
    conf = admin.describe_configs([res])[res].result()
    assert conf["retention.ms"].value == "-1"


def test_conflicting_partitions_and_config_are_refused(admin, unique):
    prefix = unique("ballast")
    ensure_topics(admin, TopicLayout(prefix=prefix, workers=4).specs())
    with pytest.raises(TopicConflictError) as err:
        ensure_topics(admin, TopicLayout(prefix=prefix, workers=8).specs())
    assert f"{prefix}.routed: has 4 partitions, Ballast needs 8" in str(err.value)
    # nothing was changed
    assert len(admin.list_topics(timeout=10).topics[f"{prefix}.routed"].partitions) == 4

    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    res = ConfigResource(
        "topic",
        f"{prefix}.control",
        incremental_configs=[
            ConfigEntry("retention.ms", "1000", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    admin.incremental_alter_configs([res])[res].result()
    # config changes propagate asynchronously: wait until the broker reports the new value
    def retention() -> str:
        described = admin.describe_configs([ConfigResource("topic", f"{prefix}.control")])
        return next(iter(described.values())).result()["retention.ms"].value

    wait_until(lambda: retention() == "1000", 30, "the new retention.ms to show")
    with pytest.raises(TopicConflictError, match=r"retention\.ms=1000"):
        ensure_topics(admin, TopicLayout(prefix=prefix, workers=4).specs())
