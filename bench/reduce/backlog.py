"""A backlog in a routed topic: the input every throughput contender (and the soak) reads.

Why a backlog, written once and read from the start by every run: with a batch cap
(``maxOffsetsPerTrigger``) and the whole input already committed, each run reads the very same
Kafka records in the very same batches, whatever its speed; batch durations and records/s then
compare the same work, and no producer or router competes with the query for the two cores.

Why routed by the router (``ballast router run``, a process, hash only): the routed topic is what
the reduce job reads in production, envelopes, epoch markers and transactions included; writing
it by hand would skip part of that. The router is stopped once everything is routed.

The events: ``keys`` keys drawn uniformly or Zipf(z) through a seeded rank -> key permutation
(the hot keys are not the first names), or, for the soak, ``keys_per_batch`` new keys for every
``batch_records`` events (user ids: each key lives in one stretch of event time and never comes
back). Values are multiples of 1/4 (sums are exact in any order, so results compare exactly),
event times advance by ``per_ms`` events per millisecond from a start a day before now (in the
past: no record is refused as "future"). The reference aggregates per (key, window) come from
the same arrays.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ballast.avro.wire import INPUT_HEADER, encode_input_body
from ballast.harness.events import Events
from ballast.harness.pipeline import Pipeline
from ballast.kafka.configuration import KafkaConfig
from ballast.kafka.topics import TopicLayout
from ballast.workload import key_name, zipf_key_ids
from bench.reduce.params import INPUT_PARTITIONS, WAIT_S, WORKERS, log

DAY_MS = 86_400_000
CHUNK = 100_000  # events generated and produced at a time


def keyed_events(n: int, keys: int, z: float, seed: int, per_ms: int, start_ms: int) -> Events:
    """``n`` events over ``keys`` keys, uniform (z = 0) or Zipf(z) through a seeded permutation."""
    if z > 0:
        ids = np.random.default_rng(seed + 1).permutation(keys)[zipf_key_ids(n, keys, z, seed)]
    else:
        ids = np.random.default_rng(seed).integers(0, keys, size=n)
    return Events(
        ids.astype(np.int64),
        np.random.default_rng(seed + 2).integers(0, 400, size=n) / 4.0,
        start_ms + np.arange(n, dtype=np.int64) // per_ms,
        [key_name(i) for i in range(keys)],
    )


def drifting_events(
    n: int, keys: int, z: float, seed: int, per_ms: int, start_ms: int, phases: int
) -> Events:
    """``n`` Zipf(z) events in ``phases`` equal stretches, each with its own seeded rank -> key
    permutation: the hot set moves at every phase start (a drifting workload)."""
    ranks = zipf_key_ids(n, keys, z, seed)
    phase = np.arange(n, dtype=np.int64) * phases // n
    ids = np.empty(n, dtype=np.int64)
    for i in range(phases):
        at = phase == i
        ids[at] = np.random.default_rng(seed + 101 + i).permutation(keys)[ranks[at]]
    return Events(
        ids,
        np.random.default_rng(seed + 2).integers(0, 400, size=n) / 4.0,
        start_ms + np.arange(n, dtype=np.int64) // per_ms,
        [key_name(i) for i in range(keys)],
    )


def fresh_key_events(
    batches: int, batch_records: int, keys_per_batch: int, seed: int, batch_event_ms: int, start_ms: int
) -> Events:
    """``batches`` stretches of ``batch_records`` events, each over ``keys_per_batch`` keys never
    seen before (uniform among them), each stretch ``batch_event_ms`` of event time."""
    n = batches * batch_records
    rng = np.random.default_rng(seed)
    stretch = np.arange(n, dtype=np.int64) // batch_records
    ids = stretch * keys_per_batch + rng.integers(0, keys_per_batch, size=n)
    within = (np.arange(n, dtype=np.int64) % batch_records) * batch_event_ms // batch_records
    return Events(
        ids,
        np.random.default_rng(seed + 2).integers(0, 400, size=n) / 4.0,
        start_ms + stretch * batch_event_ms + within,
    )


def default_start_ms(window_ms: int) -> int:
    """A day before now, on a window boundary."""
    now = int(time.time() * 1000) - DAY_MS
    return now - now % window_ms


def reference(events: Events, window_ms: int) -> pd.DataFrame:
    """Count, sum, min and max per (key id, window start): what every contender must write."""
    frame = pd.DataFrame(
        {"id": events.ids, "window_start": events.times - events.times % window_ms, "value": events.values}
    )
    return frame.groupby(["id", "window_start"])["value"].agg(["count", "sum", "min", "max"])


@dataclass
class Backlog:
    """A deployment whose routed topic holds ``records`` routed events, and what they were."""

    name: str
    pipe: Pipeline
    events: Events
    ends: dict[int, int]  # the routed topic's end offsets once everything was routed
    routed_s: float
    info: dict = field(default_factory=dict)

    @property
    def records(self) -> int:
        return int(self.events.ids.size)

    @property
    def offsets(self) -> int:
        """Offsets in the routed topic: records, markers and transaction markers."""
        return sum(self.ends.values())

    def close(self) -> None:
        self.pipe.close()


def encoded(events: Events) -> Iterator[tuple[bytes, bytes]]:
    names: dict[int, bytes] = {}
    for lo in range(0, events.ids.size, CHUNK):
        ids = events.ids[lo : lo + CHUNK].tolist()
        values = events.values[lo : lo + CHUNK].tolist()
        times = events.times[lo : lo + CHUNK].tolist()
        for j, (i, v, t) in enumerate(zip(ids, values, times, strict=True)):
            k = names.get(i)
            if k is None:
                k = events.name(i).encode()
                if events.names is not None:
                    names[i] = k
            body = encode_input_body(k, v, (lo + j).to_bytes(8, "big"), t)
            yield k, INPUT_HEADER + body


def fill(kafka: KafkaConfig, workdir: Path, name: str, events: Events, workers: int = WORKERS) -> Backlog:
    """A deployment ``bench-<name>`` of ``workers`` routed partitions; ``events`` produced to its
    input and routed by one router process (hash only, exactly-once), which is stopped once it has
    routed them all."""
    layout = TopicLayout(prefix=f"bench-{name}", workers=workers, input_partitions=INPUT_PARTITIONS)
    pipe = Pipeline(kafka, layout, workdir / f"pipeline-{name}", issuer="bench-reduce")
    started = time.monotonic()
    router = pipe.router(f"{layout.prefix}-router", name="router", exactly_once=True, log_level="warning")
    pipe.start(router)
    n = int(events.ids.size)
    log(f"{name}: producing {n:,} events to {layout.name('input')}")
    pipe.produce_raw(encoded(events), step=CHUNK)
    pipe.wait_routed(n, WAIT_S, watch=("router",))
    pipe.stop("router")
    ends = pipe.routed_ends()
    took = time.monotonic() - started
    log(
        f"{name}: {n:,} events routed into {sum(ends.values()):,} offsets of {layout.name('routed')} "
        f"in {took:.0f} s"
    )
    return Backlog(name, pipe, events, ends, took)
