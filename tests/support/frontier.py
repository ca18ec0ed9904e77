"""A routed-topic checker for the frontier rule, written against the schema file, not the router.

Why a checker of its own: the Spark job will ship a key's state for epoch e once every input
partition has delivered a marker >= e into its routed partition. That is only safe if the routed
topic keeps promises the router's own code cannot vouch for, so this module decodes the topic with
fastavro straight from ``ballast/schemas/routed_envelope.avsc`` (no Ballast codec, no router import) and
checks, for every routed partition W and every input partition p:

* every data record from p is preceded in W by a marker covering p (``unannounced`` otherwise);
* its epoch is <= the highest marker epoch covering p seen so far in W (``unannounced``): a
  worker never meets an epoch nobody told it about;
* its epoch is >= that marker epoch (``frontier``): after a marker e covering p, nothing routed
  under an epoch < e from p reaches W, which is exactly what lets W act on e;
* data epochs from p never decrease (``backwards``), and marker epochs covering p never decrease
  (``marker-backwards``: a lower marker would mean a router owning p under an older table);
* markers only cover input partitions of the job (``unknown-partition``).

Together the first three say a data record's epoch *equals* the latest marker covering its source
partition: the contract docs/router.md states.
"""

from __future__ import annotations

import io
import json
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import fastavro

SCHEMA_FILE = Path(__file__).resolve().parents[2] / "ballast" / "schemas" / "routed_envelope.avsc"
_PARSED = fastavro.parse_schema(json.loads(SCHEMA_FILE.read_text()))
HEADER = 10  # C3 01 + 8-byte fingerprint (single-object encoding)

Source = tuple[str, int]


@dataclass(frozen=True)
class Marker:
    offset: int
    epoch: int
    covers: frozenset[Source]
    router_id: str


@dataclass(frozen=True)
class Data:
    offset: int
    epoch: int
    source: Source
    source_offset: int
    key: str


@dataclass
class RoutedTopic:
    """Envelopes per routed partition in offset order (what a read_committed reader saw)."""

    partitions: dict[int, list[Marker | Data]] = field(default_factory=lambda: defaultdict(list))

    def data(self) -> Iterable[tuple[int, Data]]:
        for w, items in self.partitions.items():
            for item in items:
                if isinstance(item, Data):
                    yield w, item


def decode(value: bytes) -> tuple[str, dict]:
    """(branch name, fields) of one RoutedEnvelope value."""
    if value[:2] != b"\xc3\x01":
        raise ValueError("not a single-object encoded Avro record")
    record = fastavro.schemaless_reader(io.BytesIO(value[HEADER:]), _PARSED, _PARSED, return_record_name=True)
    name, body = record["body"]
    return {"io.ballast.EpochMarker": "marker", "io.ballast.DataRecord": "data"}.get(name, name), body


def from_messages(messages: Iterable[object]) -> RoutedTopic:
    """Build a :class:`RoutedTopic` from confluent_kafka messages of the routed topic."""
    out = RoutedTopic()
    for m in messages:
        kind, body = decode(m.value())  # type: ignore[attr-defined]
        w, off = m.partition(), m.offset()  # type: ignore[attr-defined]
        if kind not in ("marker", "data"):
            continue  # state chunks: not the router's
        if kind == "marker":
            covers = frozenset((c["topic"], c["partition"]) for c in body.get("covers", ()))
            out.partitions[w].append(Marker(off, body["epoch"], covers, body["router_id"]))
        else:
            src = (body["source_topic"], body["source_partition"])
            out.partitions[w].append(Data(off, body["epoch"], src, body["source_offset"], body["key"]))
    for items in out.partitions.values():
        items.sort(key=lambda i: i.offset)
    return out


def violations(routed: RoutedTopic, input_partitions: Iterable[Source], limit: int = 20) -> list[str]:
    """Every broken promise (at most ``limit`` per kind), as readable lines; empty = the rule holds."""
    inputs = set(input_partitions)
    found: list[str] = []
    per_kind: Counter[str] = Counter()

    def report(kind: str, text: str) -> None:
        per_kind[kind] += 1
        if per_kind[kind] <= limit:
            found.append(f"{kind}: {text}")

    for w, items in sorted(routed.partitions.items()):
        frontier: dict[Source, int] = {}
        last_data: dict[Source, int] = {}
        for item in items:
            if isinstance(item, Marker):
                for p in item.covers:
                    if p not in inputs:
                        report("unknown-partition", f"W{w}@{item.offset} covers {p}")
                    if item.epoch < frontier.get(p, -1):
                        report(
                            "marker-backwards",
                            f"W{w}@{item.offset} marker {item.epoch} covering {p} after {frontier[p]}",
                        )
                    frontier[p] = max(frontier.get(p, -1), item.epoch)
                continue
            p = item.source
            where = f"W{w}@{item.offset} record {p}@{item.source_offset} epoch {item.epoch}"
            if p not in frontier:
                report("unannounced", f"{where} before any marker covering {p}")
            elif item.epoch > frontier[p]:
                report("unannounced", f"{where} above the marker epoch {frontier[p]}")
            elif item.epoch < frontier[p]:
                report("frontier", f"{where} below the marker epoch {frontier[p]}")
            if item.epoch < last_data.get(p, -1):
                report("backwards", f"{where} after epoch {last_data[p]}")
            last_data[p] = item.epoch
    for kind, n in sorted(per_kind.items()):
        if n > limit:
            found.append(f"{kind}: {n - limit} more")
    return found


def source_counts(routed: RoutedTopic) -> Counter[tuple[str, int, int]]:
    """How often each input record (topic, partition, offset) reached the routed topic."""
    return Counter((d.source[0], d.source[1], d.source_offset) for _, d in routed.data())
