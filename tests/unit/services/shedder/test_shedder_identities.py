"""The shedder's id (its faust app and consumer group) and the routers' group it measures carry the
deployment's prefix, and the group is the one the routers of that deployment join by default."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from ballast.kafka.configuration import KafkaConfig
from ballast.kafka.topics import TopicLayout
from services.router.config import RouterSettings
from services.shedder.config import PolicySettings, ShedderSettings, StreamDeclaration
from services.shedder.run import build_app
from services.shedder.service import Shedder


def test_defaults_come_from_the_prefix_and_explicit_values_are_kept():
    orders = ShedderSettings().resolved("orders")
    assert (orders.shedder_id, orders.router_group) == ("orders.shedder", "orders.routers")
    payments = ShedderSettings().resolved("payments")
    assert (payments.shedder_id, payments.router_group) == ("payments.shedder", "payments.routers")
    explicit = ShedderSettings(shedder_id="s1", router_group="mine")
    assert explicit.resolved("orders") == explicit


def test_the_shedder_watches_the_group_its_deployments_routers_join():
    for prefix in ("ballast", "orders"):
        watched = ShedderSettings().resolved(prefix).router_group
        assert watched == RouterSettings(router_id="r1").resolved(prefix).group_id


def test_a_shedder_over_a_layout_names_its_app_group_and_requests_from_it():
    s = Shedder(
        KafkaConfig.plaintext("127.0.0.1:1", "test"),
        TopicLayout(prefix="orders"),
        ShedderSettings(),
        PolicySettings(),
        [StreamDeclaration("orders.input", 30.0)],
    )
    assert (s.id, s.settings.router_group) == ("orders.shedder", "orders.routers")
    # faust's app id is its consumer group; the static member id is the shedder's id
    app = build_app(s, ThreadPoolExecutor(1))
    assert (app.conf.id, app.conf.consumer_group_instance_id) == ("orders.shedder", "orders.shedder")
