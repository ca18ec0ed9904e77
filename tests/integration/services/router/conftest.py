"""Router test kit: fresh topic layouts, in-thread and subprocess routers, and a routed-topic verifier.

The verifier checks the router against ground truth the test builds itself: the events it produced
(sequence number in the payload's first 8 bytes) and the control states it folded from the events
it sent, never against anything the router reports.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition

from ballast.avro.codec import AvroCodec
from ballast.control.state import apply_event, initial_state
from ballast.control.writer import ControlLogWriter
from ballast.deployment.create import create_deployment
from ballast.harness.pipeline import Pipeline
from ballast.kafka.clients import make_producer, produce_all
from ballast.kafka.configuration import KafkaConfig
from ballast.kafka.reading import read_topic
from ballast.kafka.topics import TopicLayout
from ballast.waiting import wait_until
from services.router.config import RouterSettings
from services.router.router import Router
from tests.support import frontier

WORKERS = 8


def seq_of(payload: bytes) -> int:
    return int.from_bytes(payload[:8], "big")


@dataclass
class Routed:
    """What a read_committed reader sees on the routed topic."""

    data: list[dict[str, Any]] = field(default_factory=list)  # + "partition", "offset"
    markers: list[dict[str, Any]] = field(default_factory=list)
    # per partition, the envelopes in offset order: ("M", epoch, router) / ("D", seq, epoch, router)
    by_partition: dict[int, list[tuple]] = field(default_factory=lambda: defaultdict(list))
    messages: list[Any] = field(default_factory=list)  # the raw messages, for the frontier checker


class RouterKit:
    """Router tests: the router in a thread (to read its totals) or as its own process (the harness)."""

    def __init__(self, kafka: KafkaConfig, admin: Any, prefix: str, workdir: Path) -> None:
        self.kafka = kafka
        self.layout = TopicLayout(prefix=prefix, workers=WORKERS, input_partitions=4)
        created = create_deployment(kafka, self.layout, admin=admin, issuer="router-tests")
        self.pipe = Pipeline(kafka, self.layout, workdir, create=False)
        self.prefix = prefix
        self.input = self.layout.name("input")
        self.routed = self.layout.name("routed")
        self.codec = AvroCodec("io.ballast.InputEvent")
        self.envelope = AvroCodec("io.ballast.RoutedEnvelope")
        self.states = {0: initial_state(WORKERS)}  # the genesis: every routed partition active
        assert (created.genesis.routed_partitions, created.genesis.active_workers) == (WORKERS, WORKERS)
        self.writer: ControlLogWriter | None = None
        self.threads: list[tuple[Router, threading.Thread]] = []
        self.group = self.pipe.router_group  # the routers' default group, not passed to them

    # --- input and control ------------------------------------------------------------------------

    def produce_events(self, events: Iterable[dict[str, Any]]) -> int:
        return produce_all(
            make_producer(self.kafka), self.input, ((e["key"].encode(), self.codec.encode(e)) for e in events)
        )

    def produce_raw(self, records: Iterable[tuple[bytes | None, bytes | None]]) -> None:
        produce_all(make_producer(self.kafka), self.input, iter(records))  # type: ignore[arg-type]

    def send_control(self, etype: str, body: dict[str, Any]) -> dict[str, Any]:
        if self.writer is None:
            self.writer = ControlLogWriter(self.kafka, self.layout.name("control"), self.states[0])
        event = self.writer.send(etype, body)
        last = max(self.states)
        self.states[event["epoch"]] = apply_event(self.states[last], event)
        return event

    # --- routers ----------------------------------------------------------------------------------

    def settings(self, router_id: str = "r1", **kw: Any) -> RouterSettings:
        base: dict[str, Any] = dict(
            router_id=router_id,
            stats_interval_s=1.0,
            commit_interval_ms=200,
        )
        base.update(kw)
        return RouterSettings(**base)

    def start_thread(self, router_id: str = "r1", **kw: Any) -> Router:
        router = Router.connect(self.settings(router_id, **kw), self.layout, self.kafka)
        errors: list[BaseException] = []

        def run() -> None:
            try:
                router.run()
            except BaseException as exc:  # surfaced by stop_all
                errors.append(exc)
                raise

        th = threading.Thread(target=run, name=f"router-{router_id}", daemon=True)
        th.errors = errors  # type: ignore[attr-defined]
        th.start()
        self.threads.append((router, th))
        return router

    def start_process(self, router_id: str = "r1", *extra: str, name: str | None = None) -> str:
        """``ballast router run`` as a service (not waited for); its name in :attr:`pipe` (``name``:
        a service of its own, whose log holds only its lines, for a second start of one router id)."""
        command = self.pipe.router(
            router_id, *extra, name=name, commit_interval_ms=200, stats_interval_s=1, log_level="warning"
        )
        self.pipe.start(command, wait=False)
        return command.name

    def stop_all(self) -> None:
        for router, _ in self.threads:
            router.stop()
        for _, th in self.threads:
            th.join(60)
            assert not th.is_alive(), "router thread did not stop"
            assert not th.errors, f"router thread failed: {th.errors}"  # type: ignore[attr-defined]
        self.threads = []

    def close(self) -> None:
        for router, _ in self.threads:
            router.stop()
        for _, th in self.threads:
            th.join(60)
        self.pipe.close()
        if self.writer is not None:
            self.writer.close()

    def committed_total(self) -> int:
        c = Consumer(self.kafka.consumer(self.group))
        try:
            tps = [TopicPartition(self.input, p) for p in range(self.layout.input_partitions)]
            return sum(max(tp.offset, 0) for tp in c.committed(tps, timeout=10))
        except KafkaException:  # coordinator still loading / moving: ask again
            return -1
        finally:
            c.close()

    def wait_committed(self, n: int, timeout: float = 180.0) -> None:
        last = [0]

        def committed() -> bool:
            last[0] = self.committed_total()
            return last[0] >= n

        wait_until(committed, timeout, f"{n} input offsets committed", 0.3, lambda: f"{last[0]} committed")

    # --- reading results --------------------------------------------------------------------------

    def read_topic(
        self, topic: str, min_records: int, idle: float = 3.0, timeout: float = 180.0
    ) -> list[Any]:
        """Every partition of ``topic`` from offset 0 (read_committed), until idle after ``min_records``."""
        return read_topic(self.kafka, topic, min_records=min_records, idle=idle, timeout=timeout)

    def read_routed(self, expected_data: int) -> Routed:
        out = Routed()
        out.messages = self.read_topic(self.routed, expected_data)
        for m in out.messages:
            branch, body = self.envelope.decode(m.value())["body"]
            p = m.partition()
            if branch == "io.ballast.EpochMarker":
                assert body["worker"] == p
                out.markers.append({**body, "partition": p, "offset": m.offset()})
                out.by_partition[p].append(("M", body["epoch"], body["router_id"], m.offset()))
            else:
                assert branch == "io.ballast.DataRecord", branch
                rec = {**body, "partition": p, "offset": m.offset()}
                out.data.append(rec)
                out.by_partition[p].append(
                    (
                        "D",
                        seq_of(body["payload"]),
                        body["epoch"],
                        body["router_id"],
                        (body["source_partition"], body["source_offset"]),
                        m.offset(),
                    )
                )
        for p in out.by_partition:
            out.by_partition[p].sort(key=lambda t: t[-1])
        return out

    # --- the assertions shared by acceptance 2, 3 and 4 ---------------------------------------------

    def verify(self, routed: Routed, events: list[dict[str, Any]], routers: set[str]) -> None:
        n = len(events)
        seqs = defaultdict(int)
        for rec in routed.data:
            seqs[seq_of(rec["payload"])] += 1
        missing = [s for s in range(n) if seqs.get(s, 0) == 0]
        doubled = [s for s, c in seqs.items() if c > 1]
        assert not missing, f"{len(missing)} records lost, e.g. {missing[:5]}"
        assert not doubled, f"{len(doubled)} records doubled, e.g. {doubled[:5]}"
        assert len(routed.data) == n
        for rec in routed.data:
            ev = events[seq_of(rec["payload"])]
            assert (rec["key"], rec["value"], rec["payload"], rec["event_time"]) == (
                ev["key"],
                ev["value"],
                ev["payload"],
                ev["event_time"],
            )
            state = self.states[rec["epoch"]]
            assert rec["partition"] == state.table.route(rec["key"].encode()), (
                f"key {rec['key']} epoch {rec['epoch']} in partition {rec['partition']}"
            )
            assert rec["router_id"] in routers
            assert rec["source_topic"] == self.input
        # the frontier rule, judged from the schema file alone: every record's epoch equals the
        # latest marker covering its input partition in its routed partition
        inputs = {(self.input, p) for p in range(self.layout.input_partitions)}
        broken = frontier.violations(frontier.from_messages(routed.messages), inputs)
        assert not broken, "frontier rule broken:\n" + "\n".join(broken)
        # per-key order within each partition: the input order (a key lives in one input partition)
        for p, items in routed.by_partition.items():
            last: dict[str, tuple[int, int]] = {}
            for item in items:
                if item[0] == "D":
                    key = events[item[1]]["key"]
                    src = item[4]
                    if key in last:
                        assert src[0] == last[key][0], f"key {key} came from two input partitions"
                        assert src[1] > last[key][1], f"partition {p}: key {key} out of order"
                    last[key] = src


@pytest.fixture
def kit_factory(kafka_config: KafkaConfig, admin: Any, unique: Any, tmp_path: Path):
    """Kits of deployments of their own on the one broker (``name``: the prefix's stem); closed at
    the end of the test."""
    made: list[RouterKit] = []

    def make(name: str) -> RouterKit:
        made.append(RouterKit(kafka_config, admin, unique(name), tmp_path / name))
        return made[-1]

    try:
        yield make
    finally:
        for k in made:
            k.close()


@pytest.fixture
def kit(kafka_config: KafkaConfig, admin: Any, unique: Any, tmp_path: Path):
    k = RouterKit(kafka_config, admin, unique("rt"), tmp_path)
    try:
        yield k
    finally:
        k.close()
