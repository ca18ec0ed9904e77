"""``ballast topics create|list``: Ballast's topics, as declared and as the broker has them."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from typing import Any

from ballast.cli.connection import ConnectionSettings
from ballast.cli.console import add_command, print_table
from ballast.kafka.admin import describe_topics, make_admin
from ballast.kafka.topics import LayoutSettings, TopicLayout, find_conflicts
from ballast.settings import Settings, setting


@dataclass(frozen=True)
class TopicsSettings(Settings):
    """How ``ballast topics create`` creates topics."""

    replication: int = setting(-1, "replication factor of created topics (-1: the broker's default)")


def cmd_topics_create(args: argparse.Namespace) -> int:
    from ballast.deployment.create import create_deployment

    layout_settings = LayoutSettings.from_args(args)
    layout = layout_settings.layout()
    replication = TopicsSettings.from_args(args).replication
    kafka = ConnectionSettings.from_args(args).checked_kafka_config("ballast-cli")
    rf = "the broker's default" if replication == -1 else str(replication)
    print(f"topics of prefix {layout.prefix!r} on {kafka.bootstrap_servers} (replication: {rf})")
    created = create_deployment(kafka, layout, layout_settings.active_workers, replication=replication)
    for name, what in created.topics.items():
        print(f"{what:8} {name}")
    print(f"{created.genesis_status:8} genesis of {layout.name('control')} ({created.genesis.describe()})")
    return 0


def _config_text(config: dict[str, str] | None) -> str:
    return " ".join(f"{k}={v}" for k, v in sorted(config.items())) if config else "-"


def topic_report(layout: TopicLayout, described: dict | None) -> list[dict[str, Any]]:
    """Expected layout beside what the broker has (``described`` None: planned only, no broker)."""
    report = []
    for spec in layout.specs().values():
        expected_config = dict(spec.config)
        row: dict[str, Any] = {
            "role": spec.role,
            "name": spec.name,
            "expected_partitions": spec.partitions,
            "partitions": None,
            "expected_config": expected_config,
            "config": None,
            "status": "planned",
            "problems": [],
        }
        if described is not None:
            found = described.get(spec.name)
            if found is None:
                row["status"] = "missing"
            else:
                row["partitions"] = found.partitions
                row["config"] = {k: found.config.get(k) for k in expected_config}
                row["problems"] = find_conflicts(spec, found.partitions, found.config)
                row["status"] = "conflict" if row["problems"] else "ok"
        report.append(row)
    return report


def cmd_topics_list(args: argparse.Namespace) -> int:
    layout = LayoutSettings.from_args(args).layout()
    if args.planned:
        report = topic_report(layout, None)
        where = "planned, broker not asked"
    else:
        kafka = ConnectionSettings.from_args(args).checked_kafka_config("ballast-cli")
        names = [s.name for s in layout.specs().values()]
        report = topic_report(layout, describe_topics(make_admin(kafka), names))
        where = f"on {kafka.bootstrap_servers}"
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"Ballast topics of prefix {layout.prefix!r} ({where})")
    if args.planned:
        planned = [
            [s.role, s.name, str(s.partitions), _config_text(dict(s.config)), s.value_schema or "(raw)"]
            for s in layout.specs().values()
        ]
        print_table(("role", "topic", "partitions", "config Ballast relies on", "value"), planned)
        return 0
    rows = []
    for r in report:
        actual = "-" if r["partitions"] is None else str(r["partitions"])
        config = _config_text(r["expected_config"])
        if r["config"] is not None and r["config"] != r["expected_config"]:
            config += f" (has {_config_text(r['config'])})"
        rows.append([r["role"], r["name"], str(r["expected_partitions"]), actual, config, r["status"]])
    print_table(("role", "topic", "partitions", "on broker", "config Ballast relies on", "status"), rows)
    for r in report:
        for problem in r["problems"]:
            print(f"conflict: {problem}")
    missing = [r["name"] for r in report if r["status"] == "missing"]
    if missing:
        print(f"{len(missing)} topic(s) missing: run `ballast topics create` (same --prefix/--workers)")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``topics`` to the ``ballast`` command."""
    topics = add_command(sub, "topics", "Ballast's topics")
    topics_sub = topics.add_subparsers(dest="action", required=True, metavar="ACTION")
    create = add_command(
        topics_sub,
        "create",
        "create missing topics and the control log's genesis; refuse conflicting ones (idempotent)",
        "Create missing topics and verify existing ones, then write the control log's genesis (epoch 0: "
        "the routed partitions and --active-workers) unless it has one. Idempotent; a topic or a genesis "
        "that contradicts the flags is an error and nothing is changed.",
    )
    ConnectionSettings.add_arguments(create)
    LayoutSettings.add_arguments(create, only=("prefix", "workers", "input_partitions", "active_workers"))
    TopicsSettings.add_arguments(create)
    create.set_defaults(func=cmd_topics_create)
    lst = add_command(
        topics_sub,
        "list",
        "the expected topic layout beside what exists on the broker",
        "The expected topic layout beside what exists on the broker: partitions, the configs Ballast "
        "relies on, and ok / missing / conflict.",
    )
    ConnectionSettings.add_arguments(lst)
    LayoutSettings.add_arguments(lst, only=("prefix", "workers", "input_partitions"))
    lst.add_argument("--json", action="store_true", help="machine-readable output: one object per topic")
    lst.add_argument("--planned", action="store_true", help="only the planned layout; no broker needed")
    lst.set_defaults(func=cmd_topics_list)
