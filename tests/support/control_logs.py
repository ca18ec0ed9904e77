"""Control logs as the controller writes them, and the ground truth of who owned what.

Why a module: the reduce's ownership tests and the long-log start-up test build logs the same way
(paced migrations moving keys, shedding changes, a snapshot every ``snapshot_every`` epochs with
the history a tracking fold gives it, as ``ControlLogWriter`` and the controller write them), and
judge the readers against :class:`Truth`, a brute-force fold of its own: the routing state after
every epoch, and the answers read off those states one epoch at a time.
"""

from __future__ import annotations

import multiprocessing
import random
import traceback
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ballast.control.state import (
    ControlState,
    StateBuilder,
    initial_state,
    keep_for,
    make_event,
    migration_step,
    routing_update,
    scale,
    shedding,
    table_snapshot,
)
from ballast.routing.murmur2 import kafka_partition

TOPIC = "orders.input"


@dataclass
class LogShape:
    """What a generated log holds (defaults: the long-log test's)."""

    workers: int = 8
    keys: int = 2000
    epochs: int = 1_000_000
    step_keys: int = 16  # keys one migration step moves
    shed_every: int = 97  # a SHEDDING change about this often (epochs)
    scale_every: int = 0  # a SCALE about this often (0: never)
    snapshot_every: int = 1000
    cold_keys: int = 50  # pinned at epoch 1 and never moved again (their run begins there)
    seed: int = 1


def genesis_event(workers: int) -> dict:
    return make_event(
        0,
        "TABLE_SNAPSHOT",
        {"num_workers": workers, "table": {}, "keep_probability": {}, "routed_partitions": workers,
         "shed_seed": {}, "history": None},
        issuer="tests",
    )  # fmt: skip


def key_name(i: int) -> str:
    return f"user-{i:07d}"


def cold_key(i: int) -> str:
    return f"cold-{i:04d}"


def control_log(shape: LogShape) -> Iterator[dict]:
    """The events of a valid log from its genesis to ``shape.epochs`` (snapshots included), each
    folded by a tracking builder before it is handed out."""
    rng = random.Random(shape.seed)
    builder = StateBuilder(initial_state(shape.workers), history=True)
    keys = [key_name(i) for i in range(shape.keys)]

    def emit(etype: str, body: dict) -> dict:
        event = make_event(builder.epoch + 1 if builder.started else 0, etype, body, issuer="controller",
                           issued_at=1_700_000_000_000 + builder.epoch)  # fmt: skip
        builder.apply(event)
        return event

    event = genesis_event(shape.workers)
    builder.apply(event)
    yield event
    if shape.cold_keys:
        n = shape.workers
        cold = {k: (kafka_partition(k.encode(), n) + 1) % n for k in map(cold_key, range(shape.cold_keys))}
        yield emit(*routing_update(cold, (), "pinned once"))
    since = 1
    while builder.epoch < shape.epochs:
        n = builder.num_workers
        if shape.scale_every and rng.random() < 4 / shape.scale_every:
            pinned = [k.decode() for k in builder.pinned()]
            # hand the pins back first (a SCALE must not leave pins out of range)
            batch = [("ROUTING_UPDATE", routing_update({}, pinned, "before scale")[1])] if pinned else []
            batch.append(("SCALE", scale(rng.choice([w for w in range(2, shape.workers + 1) if w != n]))[1]))
        elif rng.random() < 4 / shape.shed_every:
            target = rng.choice([TOPIC, "*", TOPIC, "other.input"])
            batch = [("SHEDDING", shedding(target, rng.choice([0.25, 0.5, 0.7, 0.9, 1.0, 1.0]), "t")[1])]
        else:
            mid = f"m-{builder.epoch}"
            moved = rng.sample(keys, shape.step_keys)
            targets = {k: rng.randrange(n) for k in moved}
            homes = {k: kafka_partition(k.encode(), n) for k in moved}
            assign = {k: w for k, w in targets.items() if w != homes[k]}
            unassign = [k for k, w in targets.items() if w == homes[k]]
            froms = [builder.route(k.encode()) for k in moved]
            tos = [targets[k] for k in moved]
            batch = [
                migration_step(mid, "START", moved, froms, tos),
                routing_update(assign, unassign, "step", mid),
                migration_step(mid, "STATE_SENT", moved, froms, tos),
                migration_step(mid, "DONE", moved, froms, tos),
            ]
        for etype, body in batch:
            yield emit(etype, body)
            since += 1
            if since >= shape.snapshot_every:
                yield emit(*table_snapshot(builder.state()))
                since = 0


class Truth:
    """Every epoch's routing state, folded one event at a time; the answers read off the states.

    Independent of the reduce's view: ownership is ``state.table.route`` at each epoch, a run
    starts at the last epoch whose owner differs from the epoch before, and so on, by brute force."""

    def __init__(self, events: Sequence[dict], workers: int) -> None:
        builder = StateBuilder(initial_state(workers))
        self.states: list[ControlState] = []
        for e in events:
            assert builder.apply(e)
            assert builder.epoch == len(self.states), "a generated log is dense from 0"
            self.states.append(builder.state())
        self._changes: dict[str, list[int]] = {}

    @property
    def last(self) -> int:
        return len(self.states) - 1

    def owner(self, key: str, epoch: int) -> int:
        return self.states[epoch].table.route(key.encode())

    def changes(self, key: str) -> list[int]:
        """Every epoch at which ``key``'s owner differs from the epoch before (read off every state)."""
        found = self._changes.get(key)
        if found is None:
            owners = [s.table.route(key.encode()) for s in self.states]
            found = self._changes[key] = [c for c in range(1, len(owners)) if owners[c] != owners[c - 1]]
        return found

    def run_start(self, key: str, epoch: int) -> int:
        return max((c for c in self.changes(key) if c <= epoch), default=0)

    def run_end(self, key: str, start: int, known: int) -> int | None:
        return min((c for c in self.changes(key) if start < c <= known), default=None)

    def moves_at(self, epoch: int, keys: Sequence[str]) -> dict[str, tuple[int, int]]:
        """The moves among ``keys`` (a rehash epoch lists none: its moves follow from the key)."""
        if epoch == 0 or self.states[epoch].num_workers != self.states[epoch - 1].num_workers:
            return {}
        return {
            k: (self.owner(k, epoch - 1), self.owner(k, epoch))
            for k in keys
            if self.owner(k, epoch) != self.owner(k, epoch - 1)
        }

    def rehash_at(self, epoch: int) -> tuple[int, int] | None:
        if epoch == 0:
            return None
        before, after = self.states[epoch - 1].num_workers, self.states[epoch].num_workers
        return (before, after) if before != after else None

    def keep(self, topic: str, epoch: int) -> float:
        return keep_for(self.states[epoch].keep_probability, topic)

    def lowest_keep(self, topics: Sequence[str], first: int, last: int) -> float:
        return min(self.keep(t, e) for e in range(first, last + 1) for t in topics or ("",))

    def ever_pinned(self) -> set[str]:
        return {k.decode() for s in self.states for k in s.table}


# the producing process's librdkafka settings: big lz4 batches, the log is written as fast as it can
FAST_PRODUCER = {"linger.ms": 50, "compression.type": "lz4", "batch.size": 1 << 20}


def _encode_and_produce(kafka: Any, topic: str, chunks: Any, outcome: Any) -> None:
    """The producing process: Avro-encode each event, key it by its epoch, produce it, in order."""
    from ballast.avro.codec import AvroCodec
    from ballast.control.state import CONTROL_SCHEMA
    from ballast.kafka.clients import make_producer, produce_all

    try:
        codec = AvroCodec(CONTROL_SCHEMA)

        def records() -> Iterator[tuple[bytes, bytes]]:
            while (chunk := chunks.get(timeout=600)) is not None:
                for event in chunk:
                    yield str(event["epoch"]).encode(), codec.encode(event)

        producer = make_producer(kafka, **FAST_PRODUCER)
        outcome.put(produce_all(producer, topic, records(), flush_timeout=600))
    except BaseException:  # the caller raises it
        outcome.put(traceback.format_exc())


def produce_log(kafka: Any, topic: str, events: Iterable[dict], chunk: int = 5_000) -> int:
    """Produce ``events`` to ``topic`` in order, each keyed by its epoch; how many were written.

    Why another process: Avro-encoding a long log costs about as much CPU as generating it (and
    folding it for the truth), so on two cores the encoding and producing run beside the caller's
    generation (``spawn``: a fork would copy the caller's librdkafka clients and their threads)."""
    ctx = multiprocessing.get_context("spawn")
    chunks, outcome = ctx.Queue(maxsize=16), ctx.Queue()
    child = ctx.Process(target=_encode_and_produce, args=(kafka, topic, chunks, outcome), daemon=True)
    child.start()
    try:
        batch: list[dict] = []
        for event in events:
            batch.append(event)
            if len(batch) >= chunk:
                chunks.put(batch, timeout=600)
                batch = []
        chunks.put(batch, timeout=600)
        chunks.put(None, timeout=600)
        written = outcome.get(timeout=900)
    except BaseException:
        child.kill()  # nothing more is coming: it would wait for the next chunk
        raise
    finally:
        child.join(60)
        if child.is_alive():
            child.kill()
    if not isinstance(written, int):
        raise AssertionError(f"producing the log failed:\n{written}")
    return written
