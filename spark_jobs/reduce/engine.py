"""One worker's micro-batch: records into per-key state, state chunks out and in, closed windows out.

This is the pure core of the reduce (no Spark, no Kafka): :class:`WorkerStep` takes the worker's
rows of one micro-batch (its routed partition, decoded, in offset order), its stored bins and its
meta, and returns what to write (results, state chunks, dead letters, one stats record). The Spark
adapter (:mod:`spark_jobs.reduce.stateful`) only moves bytes between this and Spark's state store.

The protocol (docs/reduce.md, "Live migration"):

- **Runs.** A record of key k and epoch e belongs to the run of epochs that contains e in which
  routing sent k here (:meth:`~spark_jobs.reduce.ownership.OwnershipView.run_start`). A run that
  starts at epoch 0 is complete from the beginning; a later one is complete only once the state
  chunk of its start epoch has arrived from the previous owner.
- **New owner.** Records of an incomplete run are taken in at once: into a partial state for a
  mergeable processor (merged with the chunk when it comes), or buffered for the others (replayed
  after the chunk's state is installed). Nothing waits for the frontier here.
- **Old owner.** Markers advance the frontier (:mod:`spark_jobs.reduce.frontier`); when it passes
  epoch e, every key e moves away from this worker is shipped: its run is removed and its state
  sent as chunk (k, e) into the new owner's partition. A run still waiting for its own chunk is
  shipped the moment that chunk completes it (the key moved again before its state arrived).
- **Windows.** Closed windows are emitted only from complete runs with no known end. A run whose
  key is known to leave (its end epoch was seen in a marker or record) emits nothing, because a
  record of the key under the new epoch may already sit, not late, at the new owner: the window
  is emitted there, after the chunk is merged. Records older than the watermark are late: they go
  to the dead-letter topic, as Spark itself would drop them.

Everything is a function of (stored state, rows, watermark): a micro-batch replayed after a crash
writes the same chunks and results again, and the receiver applies a chunk once.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import pandas as pd

from spark_jobs.processors.interface import KeyRecords, Processor, WindowResult
from spark_jobs.reduce.frontier import InputFrontier
from spark_jobs.reduce.ownership import OwnershipView
from spark_jobs.reduce.slots import KeySlot, Run, bin_of, decode_bin, encode_bin

DATA, MARKER, CHUNK, BAD = 0, 1, 2, -1


class BinStore(Protocol):
    """Where a worker's bins live: Spark's map state in the job, a dict in unit tests."""

    def get(self, bin_id: int) -> bytes | None: ...

    def put(self, bin_id: int, blob: bytes) -> None: ...

    def remove(self, bin_id: int) -> None: ...


class DictBinStore:
    """A :class:`BinStore` in memory (unit tests, and the reference for the Spark adapter)."""

    def __init__(self) -> None:
        self.bins: dict[int, bytes] = {}

    def get(self, bin_id: int) -> bytes | None:
        return self.bins.get(bin_id)

    def put(self, bin_id: int, blob: bytes) -> None:
        self.bins[bin_id] = blob

    def remove(self, bin_id: int) -> None:
        self.bins.pop(bin_id, None)


@dataclass(frozen=True)
class WorkerConfig:
    """What one worker needs to know besides its rows: who it is and how it stores state."""

    worker: int
    input_partitions: tuple[str, ...]  # "topic:partition" of every input partition of the job
    job: str = ""  # the job id its chunks carry; chunks of other jobs on the same topic are skipped
    bins: int = 64
    chunk_bytes: int = 512 * 1024
    heavy_keys: int = 5
    record_cost_s: float = 0.0  # simulated work per record, paid where the key's state lives (benchmarks)


@dataclass(frozen=True)
class DeadLetter:
    offset: int
    raw: bytes | None
    reason: str
    detail: str


@dataclass(frozen=True)
class ChunkOut:
    key: str
    epoch: int
    from_worker: int
    to_worker: int
    chunk_index: int
    chunk_count: int
    state: bytes


@dataclass
class StepResult:
    results: list[WindowResult] = field(default_factory=list)
    chunks: list[ChunkOut] = field(default_factory=list)
    dead: list[DeadLetter] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)
    next_due: int | None = None
    meta: dict[str, Any] = field(default_factory=dict)


def new_meta() -> dict[str, Any]:
    return {
        "seen": {},
        "known": 0,
        "bin_due": {},
        "bin_bytes": {},
        "bin_keys": {},
        "pending": {},
        "steps": 0,
    }


class WorkerStep:
    """One micro-batch (or one timer firing) of one worker; build a new one per call."""

    def __init__(
        self,
        config: WorkerConfig,
        processor: Processor,
        view: OwnershipView,
        store: BinStore,
        meta: dict[str, Any] | None,
    ) -> None:
        self.config = config
        self.me = config.worker
        self.processor = processor
        self.view = view
        self.store = store
        self.meta = meta if meta is not None else new_meta()
        self.frontier = InputFrontier(config.input_partitions, self.meta["seen"])
        self._bins: dict[int, dict[str, KeySlot]] = {}
        self._dirty: set[int] = set()
        self._states: dict[tuple[str, int], Any] = {}  # decoded processor states of touched runs
        self.out = StepResult()
        self._sent: list[dict[str, Any]] = []
        self._installed: list[dict[str, Any]] = []
        self._duplicates = 0
        self._late = 0
        self._held = 0
        self._latencies: list[np.ndarray] = []
        self._records = 0

    # --- storage ----------------------------------------------------------------------------------

    def _bin(self, bin_id: int) -> dict[str, KeySlot]:
        slots = self._bins.get(bin_id)
        if slots is None:
            # only bins the meta knows to exist are read: a lookup of a missing one costs a JVM call
            blob = self.store.get(bin_id) if str(bin_id) in self.meta["bin_bytes"] else None
            slots = decode_bin(blob) if blob else {}
            self._bins[bin_id] = slots
        return slots

    def _slot(self, key: str) -> KeySlot:
        b = bin_of(key, self.config.bins)
        slots = self._bin(b)
        self._dirty.add(b)
        slot = slots.get(key)
        if slot is None:
            slot = slots[key] = KeySlot(key)
        return slot

    def _state(self, key: str, run: Run) -> Any:
        cached = self._states.get((key, run.start))
        if cached is None:
            cached = self.processor.decode(run.state) if run.state is not None else self.processor.init()
            self._states[(key, run.start)] = cached
        return cached

    def _set_state(self, key: str, run: Run, state: Any) -> None:
        self._states[(key, run.start)] = state

    def _flush(self) -> None:
        meta = self.meta
        heavy: list[tuple[int, str]] = []
        for b in sorted(self._dirty):
            slots = self._bins[b]
            due: int | None = None
            for key, slot in list(slots.items()):
                for run in slot.runs.values():
                    state = self._states.get((key, run.start))
                    if state is not None:  # touched in this step: encode it again
                        run.state = None if self.processor.is_empty(state) else self.processor.encode(state)
                        next_due = self.processor.next_due(state)
                        run.due = -1 if next_due is None else int(next_due)
                    if run.state is not None:
                        heavy.append((len(run.state), key))
                        if run.due >= 0 and self._emits(key, run):
                            due = run.due if due is None else min(due, run.due)
                if slot.empty:
                    del slots[key]
            if slots:
                blob = encode_bin(slots)
                self.store.put(b, blob)
                meta["bin_bytes"][str(b)] = len(blob)
                meta["bin_keys"][str(b)] = sum(1 for s in slots.values() if s.runs)
            else:
                self.store.remove(b)
                meta["bin_bytes"].pop(str(b), None)
                meta["bin_keys"].pop(str(b), None)
            if due is None:
                meta["bin_due"].pop(str(b), None)
            else:
                meta["bin_due"][str(b)] = int(due)
        heavy.sort(reverse=True)
        self._heavy = [{"key": k, "bytes": n} for n, k in heavy[: self.config.heavy_keys]]

    # --- the step ----------------------------------------------------------------------------------

    def run(self, rows: pd.DataFrame | None, watermark_ms: int, now_ms: int | None = None) -> StepResult:
        """Process ``rows`` (may be None: a timer), then emit every window closed by the watermark."""
        started = time.perf_counter()
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        self.watermark = int(watermark_ms)
        if rows is not None and len(rows):
            rows = rows.sort_values("offset", kind="stable").reset_index(drop=True)
            self._consume(rows, now_ms)
        self._emit_due()
        self._flush()
        meta = self.meta
        meta["seen"] = self.frontier.seen
        meta["steps"] = int(meta["steps"]) + 1
        dues = [int(d) for d in meta["bin_due"].values()]
        self.out.next_due = min(dues) if dues else None
        self.out.meta = meta
        self.out.stats = self._stats(time.perf_counter() - started)
        return self.out

    def _consume(self, rows: pd.DataFrame, now_ms: int) -> None:
        kind = rows["kind"].to_numpy()
        epochs = rows["epoch"].to_numpy()
        valid = kind != BAD
        if valid.any():
            self.meta["known"] = max(int(self.meta["known"]), int(epochs[valid].max()))
        for i in np.flatnonzero(kind == BAD):
            r = rows.iloc[i]
            self.out.dead.append(DeadLetter(int(r["offset"]), r["raw"], "malformed", str(r["error"])))
        control = np.flatnonzero((kind == MARKER) | (kind == CHUNK))
        begin = 0
        for i in [*control.tolist(), len(rows)]:
            if i > begin:
                block = rows.iloc[begin:i]
                block = block[block["kind"].to_numpy() == DATA]
                if len(block):
                    self._data(block, now_ms)
            if i < len(rows):
                r = rows.iloc[i]
                if r["kind"] == MARKER:
                    self._marker(r)
                else:
                    self._chunk(r)
            begin = i + 1

    # --- data records ------------------------------------------------------------------------------

    def _data(self, block: pd.DataFrame, now_ms: int) -> None:
        event_time = block["event_time"].to_numpy(dtype=np.int64)
        late = event_time < self.watermark
        if late.any():
            for _, r in block[late].iterrows():
                self.out.dead.append(
                    DeadLetter(
                        int(r["offset"]),
                        r["raw"],
                        "late",
                        f"event_time {int(r['event_time'])} < watermark {self.watermark}",
                    )
                )
            self._late += int(late.sum())
            block = block[~late]
            if not len(block):
                return
        self._records += len(block)
        codes, keys = pd.factorize(block["key"], sort=False)
        order = np.argsort(codes, kind="stable")
        bounds = np.concatenate(([0], np.cumsum(np.bincount(codes, minlength=len(keys)))))
        times = event_time[~late] if late.any() else event_time
        values = block["value"].to_numpy(dtype=np.float64)
        epochs = block["epoch"].to_numpy(dtype=np.int64)
        stamps = block["timestamp"].to_numpy(dtype=np.int64)
        offsets = block["offset"].to_numpy(dtype=np.int64)
        moved = self.view.moved_keys
        for j, key in enumerate(keys):
            idx = order[bounds[j] : bounds[j + 1]]
            if key in moved:
                seen, where = np.unique(epochs[idx], return_inverse=True)  # one lookup per epoch
                starts = np.array([self.view.run_start(key, int(e)) for e in seen])[where]
                owners = {self.view.owner(key, int(e)) for e in seen}
            else:
                starts = None
                owners = {self.view.owner(key, int(epochs[idx[0]]))}
            if owners != {self.me}:
                for o in offsets[idx]:
                    r = block.loc[block["offset"] == o].iloc[0]
                    self.out.dead.append(
                        DeadLetter(
                            int(o),
                            r["raw"],
                            "misrouted",
                            f"key {key!r} is not owned by worker {self.me} at its epoch",
                        )
                    )
                continue
            if starts is None:
                self._take(key, 0, KeyRecords(times[idx], values[idx]), now_ms - stamps[idx])
            else:
                for s in np.unique(starts):
                    sel = idx[starts == s]
                    self._take(key, int(s), KeyRecords(times[sel], values[sel]), now_ms - stamps[sel])

    def _take(self, key: str, start: int, records: KeyRecords, latency: np.ndarray) -> None:
        if self.config.record_cost_s:
            time.sleep(len(records) * self.config.record_cost_s)  # one sleep per key, not per record
        slot = self._slot(key)
        run = slot.runs.get(start)
        if run is None:
            if start <= slot.shipped_through:
                raise AssertionError(f"records of {key!r} for run {start}, which was shipped already")
            run = slot.runs[start] = Run(start, complete=start == 0)
            if not run.complete:
                self.meta["pending"][key] = start
        if run.complete:
            self._set_state(key, run, self.processor.process(key, records, self._state(key, run)))
            self._latencies.append(latency)
            return
        run.held += len(records)
        self._held += len(records)
        if self.processor.mergeable:
            self._set_state(key, run, self.processor.process(key, records, self._state(key, run)))
        else:
            held = KeyRecords.decode(run.buffered) if run.buffered else None
            run.buffered = (KeyRecords.concat([held, records]) if held is not None else records).encode()

    # --- markers and shipping ----------------------------------------------------------------------

    def _marker(self, r: pd.Series) -> None:
        if int(r["marker_worker"]) != self.me:
            self.out.dead.append(
                DeadLetter(
                    int(r["offset"]),
                    r["raw"],
                    "misdirected-marker",
                    f"marker for worker {int(r['marker_worker'])} in partition {self.me}",
                )
            )
            return
        before = self.frontier.frontier
        after = self.frontier.observe(int(r["epoch"]), list(r["covers"]) if r["covers"] is not None else [])
        for epoch in range(max(before, 0) + 1, after + 1):
            for key, (old, new) in self.view.moves_at(epoch).items():
                if old == self.me:
                    self._ship(key, epoch, new)

    def _ship(self, key: str, epoch: int, to: int) -> None:
        start = self.view.run_start(key, epoch - 1)
        slot = self._slot(key)
        run = slot.runs.get(start)
        if run is None:
            run = slot.runs[start] = Run(start, complete=start == 0)
            if not run.complete:
                self.meta["pending"][key] = start
        if not run.complete:
            run.ship_at, run.ship_to = epoch, to  # shipped when its own chunk completes it
            return
        state = self._state(key, run)
        blob = self.processor.encode(state)
        size = self.config.chunk_bytes
        pieces = [blob[i : i + size] for i in range(0, len(blob), size)] or [b""]
        for index, piece in enumerate(pieces):
            self.out.chunks.append(ChunkOut(key, epoch, self.me, to, index, len(pieces), piece))
        self._sent.append({"key": key, "epoch": epoch, "worker": to, "bytes": len(blob)})
        del slot.runs[start]
        self._states.pop((key, start), None)
        slot.shipped_through = max(slot.shipped_through, start)

    # --- chunks ------------------------------------------------------------------------------------

    def _chunk(self, r: pd.Series) -> None:
        if str(r["chunk_job"]) != self.config.job:
            return  # another reduce job's state, on the same routed topic
        key, epoch = str(r["key"]), int(r["epoch"])
        sender = int(r["chunk_from"])
        if (
            int(r["chunk_to"]) != self.me
            or epoch > self.view.epoch
            or self.view.owner(key, epoch) != self.me
            or self.view.run_start(key, epoch) != epoch
        ):
            self.out.dead.append(
                DeadLetter(
                    int(r["offset"]),
                    r["raw"],
                    "misdirected-chunk",
                    f"chunk ({key!r}, {epoch}) does not start a run of worker {self.me}",
                )
            )
            return
        slot = self._slot(key)
        run = slot.runs.get(epoch)
        if epoch <= slot.shipped_through or (run is not None and run.complete):
            self._duplicates += 1
            return
        if run is None:
            run = slot.runs[epoch] = Run(epoch, complete=False)
        index, count = int(r["chunk_index"]), int(r["chunk_count"])
        if run.piece_count and run.piece_count != count:
            raise AssertionError(
                f"chunk ({key!r}, {epoch}) announced {count} pieces, earlier {run.piece_count}"
            )
        run.piece_count = count
        run.pieces[str(index)] = bytes(r["chunk_state"])
        if len(run.pieces) < count:
            return
        blob = b"".join(run.pieces[str(i)] for i in range(count))
        earlier = self.processor.decode(blob) if blob else self.processor.init()
        if self.processor.mergeable:
            partial = self._states.get((key, epoch))
            if partial is None and run.state is not None:
                partial = self.processor.decode(run.state)
            state = earlier if partial is None else self.processor.merge(earlier, partial)
        else:
            state = earlier
            if run.buffered:
                state = self.processor.process(key, KeyRecords.decode(run.buffered), state)
        run.buffered = None
        run.pieces = {}
        run.piece_count = 0
        run.complete = True
        self._set_state(key, run, state)
        self.meta["pending"].pop(key, None)
        self._installed.append({"key": key, "epoch": epoch, "worker": sender, "bytes": len(blob)})
        if run.ship_at >= 0:
            self._ship(key, run.ship_at, run.ship_to)

    # --- emission ----------------------------------------------------------------------------------

    def _emits(self, key: str, run: Run) -> bool:
        """May this run emit closed windows? Complete, and no end known (see the module docstring)."""
        if not run.complete or run.ship_at >= 0:
            return False
        if key not in self.view.moved_keys:
            return True
        return self.view.run_end(key, run.start, min(int(self.meta["known"]), self.view.epoch)) is None

    def _emit_due(self) -> None:
        due_bins = {int(b) for b, d in self.meta["bin_due"].items() if int(d) <= self.watermark}
        for b in sorted(due_bins | self._dirty):
            slots = self._bin(b)
            for key, slot in slots.items():
                for run in slot.runs.values():
                    if not self._emits(key, run):
                        continue
                    state = self._states.get((key, run.start))
                    if state is None:  # untouched: its stored due time says whether to decode it
                        if run.due < 0 or run.due > self.watermark:
                            continue
                        state = self._state(key, run)
                    due = self.processor.next_due(state)
                    if due is None or due > self.watermark:
                        continue
                    results, state = self.processor.emit(key, state, self.watermark)
                    self._set_state(key, run, state)
                    self.out.results.extend(results)
                    self._dirty.add(b)

    # --- stats -------------------------------------------------------------------------------------

    def _stats(self, busy_s: float) -> dict[str, Any]:
        meta = self.meta
        lat = np.concatenate(self._latencies) if self._latencies else np.zeros(0)
        return {
            "worker": self.me,
            "epoch": int(meta["known"]),
            "records": self._records,
            "busy_ms": busy_s * 1000.0,
            "state_bytes": int(sum(meta["bin_bytes"].values())),
            "state_keys": int(sum(meta["bin_keys"].values())),
            "frontier_epoch": self.frontier.frontier,
            "watermark_ms": self.watermark,
            "step": int(meta["steps"]),
            "late_records": self._late,
            "held_records": self._held,
            "pending_keys": len(meta["pending"]),
            "duplicate_chunks": self._duplicates,
            "heavy_state": self._heavy,
            "chunks_sent": self._sent,
            "chunks_installed": self._installed,
            "flow_latency_p50_ms": float(np.percentile(lat, 50)) if len(lat) else 0.0,
            "flow_latency_p99_ms": float(np.percentile(lat, 99)) if len(lat) else 0.0,
        }


def dump_meta(meta: dict[str, Any]) -> bytes:
    return json.dumps(meta, sort_keys=True).encode()


def load_meta(blob: bytes | None) -> dict[str, Any] | None:
    return None if not blob else json.loads(blob)
