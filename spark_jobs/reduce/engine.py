"""One worker's micro-batch: records into state, state chunks out and in, closed windows out.

This is the pure core of the reduce (no Spark, no Kafka): :class:`WorkerStep` takes the worker's
rows of one micro-batch (its routed partition, decoded, in offset order), its store and its meta,
and returns what to write (results, state chunks, dead letters, one stats record). The Spark
adapter (:mod:`spark_jobs.reduce.stateful`) only moves bytes between this and Spark's state store.

**State** (docs/reduce.md, "State"): rows of (key, run, window) in columns, one storage bucket per
window start (:mod:`spark_jobs.processors.table`, :mod:`spark_jobs.reduce.store`), folded by the
processor's batch path a whole micro-batch at a time. A window's rows live until the watermark
passes the window's end plus the correction horizon; then the bucket is dropped. Nothing else is
kept per key: a key with no open window leaves the store. What migration needs is kept only while
a move is in flight (``pending`` runs waiting for their chunk, open rehash shipments).

**Runs.** A record of key k and epoch e belongs to the run of epochs in which routing sent k here
(:meth:`~spark_jobs.reduce.ownership.OwnershipView.run_start`). A run that starts at epoch 0, or
whose state is here, is *complete*; a later one is *pending* until the state chunk of its start
epoch arrives from the previous owner. Pending runs of table moves are registered when the worker
first sees their epoch (every epoch reaches every worker in markers), so a chunk with no pending
run is a duplicate: it is counted and ignored, and no memory of installed chunks is needed.
Pending runs of a rehash (``SCALE``) are registered when their records or chunks arrive; each old
owner announces *shipment done* per rehash epoch (a chunk with an empty key), after which its
keys will get no chunk: their runs complete with what they hold.

**New owner.** Records of a pending run are taken in at once: into partial rows (mergeable
processors, merged with the chunk when it comes) or appended to the held list (the others,
replayed onto the chunk's state). **Old owner.** Markers advance the frontier; when it passes an
epoch, the keys that epoch moves away are shipped, a run still pending being shipped the moment
its own chunk completes it.

**Windows.** A row is emitted once the watermark reaches its window's end, from a complete run
whose end is not known: the end is asked of the control log *as the micro-batch read it* (the job
reads the control topic as a second source: ``CONTROL`` rows carry its end to every worker), not
only of the epochs this partition has carried, because a partition that lags in event time would
otherwise emit a window of a key the log already moved, while the new owner holds records of that
window routed by a router that is ahead. Read as a source, the log's end is part of the batch's
planned offsets, so a replayed batch asks the same question and gets the same answer. A row
emitted again is a correction (revision + 1): a late record counted in it, or a partial state
merged into it after a crash replay.

**Shedding.** Routers keep each record of an input topic with the keep-probability of the
``SHEDDING`` setting in force; the record's envelope epoch names the settings its router applied
(:meth:`~spark_jobs.reduce.ownership.OwnershipView.keep_probabilities`, by its ``source_topic``).
Every record counted in a window, or excluded from it, that was kept with a probability below 1
adds its Horvitz–Thompson terms to the window's row (:mod:`spark_jobs.processors.sampling`), so
each result states its estimates and their error; held records keep their probability until they
are replayed. A window none of whose seen records was kept with p < 1 is not exact merely for that
(its shed records may all have been dropped): it is exact only if no setting below 1 was in force
while its records could have been routed, else it says no estimate is possible, as a per-key
processor's results do when something was shed during the key's run (``_opaque_terms``,
docs/results.md).

**Records left out** are dead-lettered with their reason and counted: ``late`` (older than the
watermark; counted in each of its windows' rows, a correction if the window was emitted),
``too-late`` (its windows are past the correction horizon), ``future`` (further ahead of the
batch's processing time than ``max_future_ms``: one bad clock must not move the watermark),
``misrouted`` (not this worker's key at its epoch), ``frontier-violation`` (a record of a run
already shipped: an unfenced router broke the frontier rule). None stops the job.

Everything is a function of (stored state, rows, watermark, the control log up to the end the
rows carry): a micro-batch replayed after a crash writes the same chunks and results, and the
receiver applies a chunk once.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from spark_jobs.processors.batch import NEVER, BatchProcessor, Results
from spark_jobs.processors.sampling import record_terms
from spark_jobs.processors.table import Table
from spark_jobs.reduce.frontier import InputFrontier
from spark_jobs.reduce.ownership import OwnershipView
from spark_jobs.reduce.store import HeldRecords, StateStore

DATA, MARKER, CHUNK, CONTROL, BAD = 0, 1, 2, 3, -1
DONE_KEY = ""  # a state chunk with an empty key (never a record's key): "shipment done" for its epoch


@dataclass(frozen=True)
class WorkerConfig:
    """What one worker needs to know besides its rows: who it is and how it treats time."""

    worker: int
    input_partitions: tuple[str, ...]  # "topic:partition" of every input partition of the job
    job: str = ""  # the job id its chunks carry; chunks of other jobs on the same topic are skipped
    workers: int = 1  # routed partitions: everyone a rehash "shipment done" goes to
    chunk_bytes: int = 512 * 1024
    heavy_keys: int = 5
    record_cost_s: float = 0.0  # simulated work per record, paid where the key's state lives (benchmarks)
    horizon_ms: int = 0  # emitted windows are kept this long past their end for corrections
    max_future_ms: int = 0  # records further ahead of processing time are refused (0: no bound)
    # how far before its start a window's records may have been routed, by the control log's clock
    # (producer clock skew + a router's lag behind the log): see WorkerStep._opaque_terms
    exact_margin_ms: int = 10_000


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
    results: Results = field(default_factory=Results.empty)
    chunks: list[ChunkOut] = field(default_factory=list)
    dead: list[DeadLetter] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)
    next_due: int | None = None
    meta: dict[str, Any] = field(default_factory=dict)


def new_meta() -> dict[str, Any]:
    return {
        "seen": {},  # input partition -> highest marker epoch covering it here
        "inputs": [],  # input partitions found besides the configured ones (new partitions)
        "known": 0,  # the highest epoch seen in this partition
        "log_epoch": 0,  # the control log's end as the batches so far read it (CONTROL rows)
        "shipped": 0,  # moves of every epoch up to this one have been shipped (or are owed)
        "buckets": {},  # bucket -> [due, expire, rows, bytes]
        "pending": {},  # key -> {run: {"ship_at", "ship_to", "held", "counts": {count: [indices]}}}
        "rehash": {},  # rehash epoch -> {"done": [senders], "installed": [keys]} (as the receiver)
        "closed": [],  # rehash epochs every sender has announced done
        "owed_done": [],  # rehash epochs whose "shipment done" this worker still owes
        "steps": 0,
    }


class WorkerStep:
    """One micro-batch (or one timer firing) of one worker; build a new one per call."""

    def __init__(
        self,
        config: WorkerConfig,
        processor: BatchProcessor,
        view: OwnershipView,
        store: StateStore,
        meta: dict[str, Any] | None,
        extra_inputs: tuple[str, ...] = (),
    ) -> None:
        self.config = config
        self.me = config.worker
        self.processor = processor
        self.schema = processor.schema()
        self.view = view
        self.store = store
        self.meta = meta if meta is not None else new_meta()
        for name, value in new_meta().items():
            self.meta.setdefault(name, value)
        inputs = sorted(set(config.input_partitions) | set(self.meta["inputs"]) | set(extra_inputs))
        self.meta["inputs"] = [p for p in inputs if p not in config.input_partitions]
        self.frontier = InputFrontier(inputs, self.meta["seen"])
        # the job's input topics: a record that does not name its own is from the only one (if one)
        self.topics = tuple(sorted({pid.rsplit(":", 1)[0] for pid in inputs}))
        self._topic = self.topics[0] if len(self.topics) == 1 else ""
        self._loaded: dict[int, Table] = {}
        self._dirty: set[int] = set()
        self.out = StepResult()
        self._results: list[Results] = []
        self._sent: list[dict[str, Any]] = []
        self._installed: list[dict[str, Any]] = []
        self._counts: dict[str, int] = defaultdict(int)
        self._latencies: list[np.ndarray] = []
        self._records = 0
        self._all_loaded = False
        self._held: HeldRecords | None = None  # the store's held records, once a step reads them
        self._held_dirty = False
        self._touched_keys: set[str] = set()

    # --- storage ------------------------------------------------------------------------------------

    def _bucket(self, b: int) -> Table:
        table = self._loaded.get(b)
        if table is None:
            blob = self.store.get_bucket(b) if str(b) in self.meta["buckets"] else None
            table = Table.from_bytes(self.schema, blob) if blob else Table.empty(self.schema)
            self._loaded[b] = table
        return table

    def _load_all(self) -> None:
        if not self._all_loaded:
            for b in list(self.meta["buckets"]):
                self._bucket(int(b))
            self._all_loaded = True

    def _all_rows(self) -> Table:
        self._load_all()
        return Table.concat(
            [self._bucket(int(b)) for b in sorted(self._loaded)] or [Table.empty(self.schema)]
        )

    def _put_rows(self, rows: Table, buckets: set[int]) -> None:
        """``rows`` become the contents of ``buckets`` (each row into its own bucket)."""
        ids = self.processor.bucket_of_rows(rows)
        order = np.argsort(ids, kind="stable")
        ids_sorted = ids[order]
        present = set(np.unique(ids_sorted).tolist())
        for b in buckets | present:
            lo, hi = np.searchsorted(ids_sorted, [b, b + 1])
            self._loaded[b] = rows.take(order[lo:hi])
            self._dirty.add(b)

    def _add_rows(self, rows: Table) -> None:
        """``rows`` (of (key, run)s the buckets do not hold) added to their buckets."""
        ids = self.processor.bucket_of_rows(rows)
        for b in np.unique(ids).tolist():
            self._loaded[b] = Table.concat([self._bucket(b), rows.take(np.flatnonzero(ids == b))])
            self._dirty.add(b)

    def _all_held(self) -> HeldRecords:
        """Every held record, read from the store once a step (installs take from this copy)."""
        if self._held is None:
            self._held = self.store.held()
        return self._held

    def _holds_any(self) -> bool:
        return any(e.get("held", 0) for runs in self.meta["pending"].values() for e in runs.values())

    def _flush(self) -> None:
        if self._held_dirty and self._held is not None:
            self.store.replace_held(self._held)
        meta_buckets = self.meta["buckets"]
        for b in sorted(self._dirty):
            table = self._loaded[b]
            if not len(table):
                if str(b) in meta_buckets:
                    self.store.remove_bucket(b)
                    del meta_buckets[str(b)]
                continue
            blob = table.to_bytes()
            self.store.put_bucket(b, blob)
            due, expire = self._bucket_times(table)
            meta_buckets[str(b)] = [int(due), int(expire), len(table), len(blob)]

    def _bucket_times(self, table: Table) -> tuple[int, int]:
        """When the bucket next needs a look: its earliest row due for emission (rows of runs that
        cannot emit now do not count: an install looks at every bucket), and the earliest a row
        may be dropped past the horizon."""
        may = self._may_emit(table)
        dues = self.processor.due(table)[may]
        due = int(dues.min()) if dues.size else NEVER
        expire = self._expiry(table)
        expire_any = int(expire[may].min()) if may.any() else NEVER
        return due, expire_any

    def _expiry(self, table: Table) -> np.ndarray:
        if not self.processor.windowed:
            return np.full(len(table), NEVER, dtype=np.int64)
        return self.processor.window_end(table) + int(self.config.horizon_ms)

    # --- the step -----------------------------------------------------------------------------------

    def run(self, rows: pd.DataFrame | None, watermark_ms: int, now_ms: int | None = None) -> StepResult:
        """Process ``rows`` (may be None: a timer), then emit every row the watermark closed."""
        started = time.perf_counter()
        self.now_ms = int(time.time() * 1000) if now_ms is None else int(now_ms)
        self.watermark = int(watermark_ms)
        if rows is not None and len(rows):
            control = rows["kind"].to_numpy() == CONTROL
            if control.any():
                ends = rows["epoch"].to_numpy()[control]
                self.meta["log_epoch"] = max(int(self.meta.get("log_epoch", 0)), int(ends.max()))
                rows = rows[~control]
        if rows is not None and len(rows):
            rows = rows.sort_values("offset", kind="stable").reset_index(drop=True)
            self._consume(rows)
        self._settle_owed_done()
        self._emit_due()
        self._flush()
        meta = self.meta
        meta["seen"] = self.frontier.seen
        meta["steps"] = int(meta["steps"]) + 1
        dues = [d for b in meta["buckets"].values() for d in (b[0], b[1]) if d < NEVER]
        self.out.next_due = min(dues) if dues else None
        self.out.results = Results.concat(self._results)
        self.out.meta = meta
        self.out.stats = self._stats(time.perf_counter() - started)
        return self.out

    def _consume(self, rows: pd.DataFrame) -> None:
        kind = rows["kind"].to_numpy()
        epochs = rows["epoch"].to_numpy()
        valid = kind != BAD
        if valid.any():
            self._see_epoch(int(epochs[valid].max()))
        for i in np.flatnonzero(kind == BAD):
            r = rows.iloc[i]
            self._dead(int(r["offset"]), r.get("raw"), "malformed", str(r["error"]))
        control = np.flatnonzero((kind == MARKER) | (kind == CHUNK))
        begin = 0
        for i in [*control.tolist(), len(rows)]:
            if i > begin:
                block = rows.iloc[begin:i]
                block = block[block["kind"].to_numpy() == DATA]
                if len(block):
                    self._data(block)
            if i < len(rows):
                r = rows.iloc[i]
                if r["kind"] == MARKER:
                    self._marker(r)
                else:
                    self._chunk(r)
            begin = i + 1

    def _dead(self, offset: int, raw: Any, reason: str, detail: str) -> None:
        self.out.dead.append(
            DeadLetter(offset, raw if isinstance(raw, bytes | bytearray) else None, reason, detail)
        )
        self._counts[reason] += 1

    # --- epochs, pending runs -----------------------------------------------------------------------

    def _see_epoch(self, epoch: int) -> None:
        """Every epoch up to ``epoch`` has reached this partition: register the runs its table moves
        bring here as pending (their chunks must come), in epoch order."""
        known = int(self.meta["known"])
        if epoch <= known:
            return
        pending = self.meta["pending"]
        for e in range(known + 1, epoch + 1):
            for key, (_old, new) in self.view.moves_at(e).items():
                if new == self.me:
                    pending.setdefault(key, {}).setdefault(str(e), _new_pending())
        self.meta["known"] = epoch

    def _pending(self, key: str, run: int) -> dict[str, Any] | None:
        return self.meta["pending"].get(key, {}).get(str(run))

    def _rehash_complete(self, key: str, run: int) -> bool:
        """Whether a run started by a rehash needs no chunk any more (done, installed or closed)."""
        if run in self.meta["closed"]:
            return True
        opened = self.meta["rehash"].get(str(run))
        if opened is None:
            return False
        return key in opened["installed"] or self.view.owner(key, run - 1) in opened["done"]

    def _is_rehash_run(self, run: int) -> bool:
        return run > 0 and self.view.rehash_at(run) is not None

    def _status(self, keys: np.ndarray, runs: np.ndarray) -> np.ndarray:
        """Per record: True when its run is complete here, False when it waits for its chunk (a
        rehash run not known complete becomes pending here)."""
        complete = np.ones(keys.size, dtype=bool)
        pending_keys = self.meta["pending"]
        candidates = np.flatnonzero(runs > 0) if not pending_keys else np.arange(keys.size)
        for i in candidates.tolist():
            key, run = str(keys[i]), int(runs[i])
            if self._pending(key, run) is not None:
                complete[i] = False
            elif run > 0 and self._is_rehash_run(run) and not self._rehash_complete(key, run):
                pending_keys.setdefault(key, {})[str(run)] = _new_pending()
                complete[i] = False
        return complete

    # --- data records ------------------------------------------------------------------------------

    def _data(self, block: pd.DataFrame) -> None:
        c = self.config
        keys = block["key"].to_numpy(dtype=object)
        t = block["event_time"].to_numpy(dtype=np.int64)
        v = block["value"].to_numpy(dtype=np.float64)
        epochs = block["epoch"].to_numpy(dtype=np.int64)
        offsets = block["offset"].to_numpy(dtype=np.int64)
        stamps = block["timestamp"].to_numpy(dtype=np.int64)
        raw = block["raw"].to_numpy() if "raw" in block else np.full(len(block), None)
        keep = self._keep(block, epochs)
        ok = np.ones(keys.size, dtype=bool)
        if c.max_future_ms > 0:
            future = t > self.now_ms + c.max_future_ms
            for i in np.flatnonzero(future).tolist():
                self._dead(int(offsets[i]), raw[i], "future",
                           f"event_time {int(t[i])} is more than {c.max_future_ms} ms after processing "
                           f"time {self.now_ms}")  # fmt: skip
            ok &= ~future
        owner, run = self.view.owners(keys, epochs)
        misrouted = ok & (owner != self.me)
        for i in np.flatnonzero(misrouted).tolist():
            detail = f"key {keys[i]!r} is not owned by worker {self.me} at epoch {int(epochs[i])}"
            self._dead(int(offsets[i]), raw[i], "misrouted", detail)
        ok &= ~misrouted
        violation = ok & self._shipped_runs(keys, run)
        for i in np.flatnonzero(violation).tolist():
            detail = (
                f"key {keys[i]!r}, epoch {int(epochs[i])}: its run (from epoch {int(run[i])}) was shipped "
                "when the frontier passed its end; the record came after it (an unfenced router)"
            )
            self._dead(int(offsets[i]), raw[i], "frontier-violation", detail)
        ok &= ~violation
        # a run a rehash brought here waits for its chunk, late records' runs too: their exclusion
        # rows are partial rows of that run, merged when the state arrives (never shipped before)
        if ok.any():
            self._status(keys[ok], run[ok])
        late = ok & (t < self.watermark)
        if late.any():
            self._exclude(keys[late], run[late], t[late], offsets[late], raw[late], keep[late])
        fresh = ok & ~late
        if not fresh.any():
            return
        keys, run, t, v, keep = keys[fresh], run[fresh], t[fresh], v[fresh], keep[fresh]
        stamps, offsets = stamps[fresh], offsets[fresh]
        self._records += keys.size
        if c.record_cost_s:
            time.sleep(keys.size * c.record_cost_s)
        complete = self._status(keys, run)
        self._latencies.append(self.now_ms - stamps[complete])
        if self.processor.mergeable or complete.all():
            self._fold(keys, run, t, v, keep)
        else:
            self._fold(keys[complete], run[complete], t[complete], v[complete], keep[complete])
            held = ~complete
            self._hold(keys[held], run[held], offsets[held], t[held], v[held], keep[held])
        held_count = int((~complete).sum())
        if held_count:
            self._counts["held"] += held_count
            for key, r in zip(keys[~complete].tolist(), run[~complete].tolist(), strict=True):
                self._pending(str(key), int(r))["held"] += 1  # type: ignore[index]

    def _keep(self, block: pd.DataFrame, epochs: np.ndarray) -> np.ndarray:
        """Per record: the probability its router kept it with (all 1.0 while the log never shed).

        Its input topic is the envelope's ``source_topic``; a row without one is from the job's only
        input topic (or, with several, only a ``*`` setting applies to it). A record kept under a
        probability of 0 was not sampled by that setting (a router that did not apply it): it
        stands for itself, as with 1.0."""
        n = epochs.size
        if not self.view.sheds:
            return np.ones(n, dtype=np.float64)
        if "source_topic" in block:
            topics = block["source_topic"].to_numpy(dtype=object).copy()
            topics[pd.isna(topics)] = self._topic
        else:
            topics = np.full(n, self._topic, dtype=object)
        keep = self.view.keep_probabilities(topics, epochs)
        return np.where(keep > 0.0, keep, 1.0)

    def _with_terms(
        self, rows: Table, keys: np.ndarray, runs: np.ndarray, t: np.ndarray, keep: np.ndarray,
        values: np.ndarray | None,
    ) -> Table:  # fmt: skip
        """``rows`` with the sampling terms of the records kept with a probability below 1 added
        to their windows' rows (the rows of a processor that cannot see windows are left alone)."""
        shed = keep < 1.0
        if not self.processor.windowed or not shed.any():
            return rows
        idx = np.flatnonzero(shed)
        index, starts = self.processor.windows.assign(t[idx])
        rec = idx[index]
        picked = None if values is None else values[rec]
        return self._add_terms(rows, keys[rec], runs[rec], starts, keep[rec], picked)

    def _add_terms(
        self, rows: Table, keys: np.ndarray, runs: np.ndarray, windows: np.ndarray, keep: np.ndarray,
        values: np.ndarray | None,
    ) -> Table:  # fmt: skip
        """``rows`` with the terms of (record, window) pairs added (only pairs with keep < 1 count)."""
        shed = keep < 1.0
        if not shed.any():
            return rows
        values = None if values is None else values[shed]
        terms = record_terms(keep[shed], values)
        side = self.processor.side_rows(keys[shed], runs[shed], windows[shed], **terms)
        return self.processor.combine(Table.concat([rows, side]))

    def _shipped_runs(self, keys: np.ndarray, runs: np.ndarray) -> np.ndarray:
        """Records of runs this worker has shipped already: their run ended at an epoch whose moves
        were shipped (the frontier passed it). Asked only of keys that can have an end."""
        out = np.zeros(keys.size, dtype=bool)
        shipped = int(self.meta["shipped"])
        if shipped <= 0:
            return out
        moved = self.view.moved_keys
        rehash = any(e <= shipped for e in self.view.rehash_epochs)
        suspects = (
            np.arange(keys.size)
            if rehash
            else np.flatnonzero(np.fromiter((k in moved for k in keys.tolist()), dtype=bool, count=keys.size))
        )
        seen: dict[tuple[str, int], bool] = {}
        for i in suspects.tolist():
            ident = (str(keys[i]), int(runs[i]))
            if ident not in seen:
                end = self.view.run_end(ident[0], ident[1], shipped)
                seen[ident] = end is not None
            out[i] = seen[ident]
        return out

    def _windows_of(self, keys: np.ndarray, t: np.ndarray) -> np.ndarray:
        return self.processor.buckets_of_records(keys, t)

    def _fold(
        self, keys: np.ndarray, runs: np.ndarray, t: np.ndarray, v: np.ndarray, keep: np.ndarray
    ) -> None:
        if not keys.size:
            return
        buckets = set(np.unique(self._windows_of(keys, t)).tolist())
        state = Table.concat([self._bucket(b) for b in sorted(buckets)] or [Table.empty(self.schema)])
        folded = self.processor.fold(state, keys, runs, t, v)
        folded = self._with_terms(folded, keys, runs, t, keep, v)
        self._put_rows(folded, buckets)
        self._touched_keys.update(np.unique(keys).tolist()[: 10 * self.config.heavy_keys])

    def _hold(
        self,
        keys: np.ndarray,
        runs: np.ndarray,
        seq: np.ndarray,
        t: np.ndarray,
        v: np.ndarray,
        keep: np.ndarray,
    ) -> None:
        if not keys.size:
            return
        block = HeldRecords(keys, runs, seq, t, v, keep)
        if self._held is None:
            self.store.append_held(block)  # one call, nothing read back
        else:
            self._held = HeldRecords.concat([self._held, block])
            self._held_dirty = True

    def _exclude(
        self, keys: np.ndarray, runs: np.ndarray, t: np.ndarray, offsets: np.ndarray, raw: np.ndarray,
        keep: np.ndarray,
    ) -> None:  # fmt: skip
        """Late records: counted in the rows of their windows still within the horizon (dead-
        lettered as ``late``; one kept by shedding stands for 1/p offered records there too), else
        dead-lettered as ``too-late``."""
        p = self.processor
        horizon = int(self.config.horizon_ms)
        if p.windowed:
            index, starts = p.windows.assign(t)
            alive = starts + p.windows.size_ms + horizon > self.watermark
            counted = np.zeros(t.size, dtype=bool)
            counted[index[alive]] = True
            too_late = ~counted
        else:  # a per-key processor's windows are its own: late, counted in the stats only
            counted = too_late = np.zeros(t.size, dtype=bool)
        for i in range(t.size):
            reason = "too-late" if too_late[i] else "late"
            if not p.windowed:
                where = "counted in the worker's stats (a per-key processor's windows are its own)"
            elif counted[i]:
                where = "counted in its windows' rows"
            else:
                where = "its windows are past the correction horizon"
            self._dead(
                int(offsets[i]),
                raw[i],
                reason,
                f"event_time {int(t[i])} < watermark {self.watermark}; {where}",
            )
        if counted.any() and p.windowed:
            idx = np.flatnonzero(counted)
            index, starts = p.windows.assign(t[idx])
            alive = starts + p.windows.size_ms + horizon > self.watermark
            buckets = set(starts[alive].tolist())
            state = Table.concat([self._bucket(b) for b in sorted(buckets)] or [Table.empty(self.schema)])
            rec = idx[index[alive]]
            updated = p.exclude(state, keys[rec], runs[rec], starts[alive])
            updated = self._add_terms(updated, keys[rec], runs[rec], starts[alive], keep[rec], None)
            self._put_rows(updated, buckets)
            self._counts["excluded"] += int(counted.sum())

    # --- markers and shipping ----------------------------------------------------------------------

    def _marker(self, r: pd.Series) -> None:
        if int(r["marker_worker"]) != self.me:
            self._dead(int(r["offset"]), r.get("raw"), "misdirected-marker",
                       f"marker for worker {int(r['marker_worker'])} in partition {self.me}")  # fmt: skip
            return
        covers = list(r["covers"]) if r["covers"] is not None else []
        for pid in covers:
            if pid not in self.frontier._known:  # a new input partition: it joins the frontier
                self.frontier = InputFrontier([*self.frontier.partitions, pid], self.frontier.seen)
                self.meta["inputs"] = sorted({*self.meta["inputs"], pid} - set(self.config.input_partitions))
        after = self.frontier.observe(int(r["epoch"]), covers)
        shipped = int(self.meta["shipped"])
        for epoch in range(shipped + 1, after + 1):
            self._ship_epoch(epoch)
            self.meta["shipped"] = epoch

    def _ship_epoch(self, epoch: int) -> None:
        """Ship everything ``epoch`` moves away from this worker."""
        moving = [(k, old, new) for k, (old, new) in self.view.moves_at(epoch).items() if old == self.me]
        rehash = self.view.rehash_at(epoch)
        if rehash is not None:
            moving = self._rehash_moves(epoch)
            self.meta["owed_done"].append(epoch)
        for key, _old, new in moving:
            self._ship(key, epoch, new)

    def _rehash_moves(self, epoch: int) -> list[tuple[str, int, int]]:
        """Every key held here (in state, held or pending) whose owner changes at ``epoch``."""
        rows = self._all_rows()
        keys = set(rows.key.tolist()) | set(self.meta["pending"])
        if not self.processor.mergeable and self._holds_any():
            keys |= set(self._all_held().key.tolist())
        if not keys:
            return []
        arr = np.array(sorted(keys), dtype=object)
        before, _ = self.view.owners(arr, np.full(arr.size, epoch - 1, dtype=np.int64))
        after, _ = self.view.owners(arr, np.full(arr.size, epoch, dtype=np.int64))
        return [
            (str(k), int(b), int(a))
            for k, b, a in zip(arr.tolist(), before.tolist(), after.tolist(), strict=True)
            if b == self.me and a != self.me
        ]

    def _ship(self, key: str, epoch: int, to: int) -> None:
        start = self.view.run_start(key, epoch - 1)
        entry = self._pending(key, start)
        if entry is None and self._is_rehash_run(start) and not self._rehash_complete(key, start):
            # a rehash brought the key here and its old owner has not said done: state may still come
            entry = self.meta["pending"].setdefault(key, {}).setdefault(str(start), _new_pending())
        if entry is not None:  # its own chunk has not come: ship when it does
            entry["ship_at"], entry["ship_to"] = epoch, to
            return
        rows = self._take_rows(key, start)
        self._send(key, epoch, to, rows)

    def _take_rows(self, key: str, run: int) -> Table:
        """The rows of (key, run), removed from the state."""
        everything = self._all_rows()
        mine = (everything.key == key) & (everything.run == run)
        if mine.any():
            for b, table in list(self._loaded.items()):
                keep = ~((table.key == key) & (table.run == run))
                if not keep.all():
                    self._loaded[b] = table.take(np.flatnonzero(keep))
                    self._dirty.add(b)
        return everything.take(np.flatnonzero(mine))

    def _send(self, key: str, epoch: int, to: int, rows: Table) -> None:
        blob = rows.to_bytes()
        size = self.config.chunk_bytes
        pieces = [blob[i : i + size] for i in range(0, len(blob), size)] or [b""]
        for index, piece in enumerate(pieces):
            self.out.chunks.append(ChunkOut(key, epoch, self.me, to, index, len(pieces), piece))
        self._sent.append({"key": key, "epoch": epoch, "worker": to, "bytes": len(blob)})

    def _settle_owed_done(self) -> None:
        """Announce "shipment done" for a rehash epoch once nothing owed for it can still come here.

        Owed: the state of every run here that ends at the epoch. Still to come: a pending run whose
        chunk has not arrived, or the state of any key from an earlier rehash that is not closed
        here yet (its old owners have not all announced done), whose run may end at this epoch."""
        still = []
        closed = set(self.meta["closed"])
        for epoch in self.meta["owed_done"]:
            earlier_open = any(e < epoch and e not in closed for e in self.view.rehash_epochs)
            waiting = earlier_open or any(
                self.view.run_end(key, int(run), epoch) is not None
                for key, runs in self.meta["pending"].items()
                for run in runs
            )
            if waiting:
                still.append(epoch)
                continue
            for w in range(self.config.workers):
                if w != self.me:
                    self.out.chunks.append(ChunkOut(DONE_KEY, epoch, self.me, w, 0, 0, b""))
        self.meta["owed_done"] = still

    # --- chunks ------------------------------------------------------------------------------------

    def _chunk(self, r: pd.Series) -> None:
        if str(r["chunk_job"]) != self.config.job:
            return  # another reduce job's state, on the same routed topic
        key, epoch = str(r["key"]), int(r["epoch"])
        sender = int(r["chunk_from"])
        if int(r["chunk_to"]) != self.me:
            self._dead(
                int(r["offset"]),
                r.get("raw"),
                "misdirected-chunk",
                f"chunk for worker {int(r['chunk_to'])} in partition {self.me}",
            )
            return
        if key == DONE_KEY:
            self._done(epoch, sender)
            return
        if (
            epoch > self.view.epoch
            or self.view.owner(key, epoch) != self.me
            or self.view.run_start(key, epoch) != epoch
        ):
            self._dead(int(r["offset"]), r.get("raw"), "misdirected-chunk",
                       f"chunk ({key!r}, {epoch}) does not start a run of worker {self.me}")  # fmt: skip
            return
        entry = self._pending(key, epoch)
        if entry is None:
            if not self._is_rehash_run(epoch) or self._rehash_complete(key, epoch):
                self._counts["duplicate_chunks"] += 1  # installed already (or nothing was owed)
                return
            entry = self.meta["pending"].setdefault(key, {}).setdefault(str(epoch), _new_pending())
        count, index = int(r["chunk_count"]), int(r["chunk_index"])
        blob = bytes(r["chunk_state"]) if r["chunk_state"] is not None else b""
        if count > 1:
            got = entry["counts"].setdefault(str(count), [])
            if index not in got:
                self.store.put_piece(_piece(key, epoch, count, index), blob)
                got.append(index)
            if len(got) < count:
                return
            blob = b"".join(self.store.get_piece(_piece(key, epoch, count, i)) or b"" for i in range(count))
        self._install(key, epoch, blob, sender, entry)

    def _install(self, key: str, run: int, blob: bytes, sender: int, entry: dict[str, Any]) -> None:
        p = self.processor
        earlier = Table.from_bytes(self.schema, blob) if blob else Table.empty(self.schema)
        earlier.run = np.full(len(earlier), run, dtype=np.int64)  # the sender's run ids are its own
        partial = self._take_rows(key, run)
        if p.mergeable:
            state = p.merge(earlier, partial) if len(partial) else earlier
        else:
            # a non-mergeable run holds its records, not rows: its partial rows only count exclusions
            state = p.combine(Table.concat([earlier, partial]))
            held = self._take_held(key, run) if entry.get("held", 0) else HeldRecords.empty()
            if len(held):
                order = np.argsort(held.seq, kind="stable")
                h = held.take(order)
                state = p.fold(state, h.key, h.run, h.event_time, h.value)
                state = self._with_terms(state, h.key, h.run, h.event_time, h.keep, h.value)
        self._finish_pending(key, run, entry)
        if self._is_rehash_run(run):
            opened = self.meta["rehash"].setdefault(str(run), {"done": [], "installed": []})
            opened["installed"].append(key)
        self._installed.append({"key": key, "epoch": run, "worker": sender, "bytes": len(blob)})
        # a run that ended while its state was on the way (the key moved on, a rehash came after)
        # goes on at once to the owner from its end: this worker's shipping for that epoch is past
        end = self.view.run_end(key, run, int(self.meta["shipped"]))
        if end is not None:
            self._send(key, end, self.view.owner(key, end), state)
            return
        self._add_rows(state)

    def _take_held(self, key: str, run: int) -> HeldRecords:
        held = self._all_held()
        mine = (held.key == key) & (held.run == run)
        if mine.any():
            self._held = held.take(np.flatnonzero(~mine))
            self._held_dirty = True
        return held.take(np.flatnonzero(mine))

    def _finish_pending(self, key: str, run: int, entry: dict[str, Any]) -> None:
        for count, got in entry.get("counts", {}).items():
            for index in got:
                self.store.remove_piece(_piece(key, run, int(count), int(index)))
        runs = self.meta["pending"].get(key, {})
        runs.pop(str(run), None)
        if not runs:
            self.meta["pending"].pop(key, None)
        self._load_all()  # its rows in every bucket may emit now: they are looked at this step

    def _done(self, epoch: int, sender: int) -> None:
        """A sender's "shipment done" for rehash epoch ``epoch``: its keys' runs here complete."""
        if epoch in self.meta["closed"]:
            self._counts["duplicate_chunks"] += 1
            return
        opened = self.meta["rehash"].setdefault(str(epoch), {"done": [], "installed": []})
        if sender in opened["done"]:
            self._counts["duplicate_chunks"] += 1
            return
        opened["done"].append(sender)
        for key, runs in list(self.meta["pending"].items()):
            entry = runs.get(str(epoch))
            if entry is None or self.view.owner(key, epoch - 1) != sender:
                continue
            self._install(key, epoch, b"", sender, entry)  # nothing to merge: complete with what is here
            self._installed.pop()  # not a chunk
        if len(opened["done"]) >= self.config.workers - 1:
            del self.meta["rehash"][str(epoch)]
            self.meta["closed"].append(epoch)

    # --- emission ----------------------------------------------------------------------------------

    def log_epoch(self) -> int:
        """The control log's end as this batch knows it: its CONTROL rows (the job reads the
        control topic as a second source, so a replayed batch reads the same end), or the highest
        epoch its own partition carried, whichever is later."""
        return max(int(self.meta.get("log_epoch", 0)), int(self.meta["known"]))

    def _may_emit(self, rows: Table) -> np.ndarray:
        """Per row: its run is complete here and has no known end (asked of the log as this batch
        read it, not only of the epochs this partition has carried)."""
        may = np.ones(len(rows), dtype=bool)
        if not len(rows):
            return may
        pending = self.meta["pending"]
        moved = self.view.moved_keys
        rehash = bool(self.view.rehash_epochs)
        latest = self.log_epoch()
        check: dict[tuple[str, int], bool] = {}
        keys, runs = rows.key.tolist(), rows.run.tolist()
        for i, (key, run) in enumerate(zip(keys, runs, strict=True)):
            if not (rehash or run or key in moved or key in pending):
                continue
            ident = (key, run)
            ok = check.get(ident)
            if ok is None:
                ok = self._pending(key, run) is None and self.view.run_end(key, run, latest) is None
                check[ident] = ok
            may[i] = ok
        return may

    def _emit_due(self) -> None:
        wm = self.watermark
        for b, (due, expire, _rows, _bytes) in list(self.meta["buckets"].items()):
            if due <= wm or expire <= wm:
                self._bucket(int(b))
        for b in sorted(self._loaded):
            table = self._loaded[b]
            if not len(table):
                continue
            may = self._may_emit(table)
            rows_before = len(table)
            results, table = self.processor.emit(table, wm, may)
            if len(results):
                self._opaque_terms(results)
                self._results.append(results)
                self._counts["corrections"] += int((results.revision > 0).sum())
                self._dirty.add(b)
            if len(table) != rows_before:  # a per-key state emptied by emission left the table
                may = self._may_emit(table)
                self._dirty.add(b)
            drop = may & (self._expiry(table) <= wm) & ~table.columns["dirty"].astype(bool)
            if drop.any():
                table = table.take(np.flatnonzero(~drop))
                self._dirty.add(b)
            self._loaded[b] = table

    def _opaque_terms(self, results: Results) -> None:
        """Rows whose own records cannot show what was shed from them get no estimate: they say
        so (``opaque_keep``, the lowest keep-probability below 1 in force for the job's topics)
        instead of claiming to be exact.

        A per-key processor's windows are its own: any of its rows built while a setting below 1
        was in force at some epoch of the key's run (from its start to the log's end as this
        batch read it).

        A windowed row with no record kept with p < 1 (``sampled == 0``) looks exact, but the
        records it lost may all have been dropped. It is exact only if no setting below 1 was in
        force from the epoch in force at log time ``window_start - exact_margin_ms`` to the one in
        force at ``window_end + exact_margin_ms`` (at most the log's end as this batch read it):
        a record of the window has an event time in ``[start, end)``, and is taken to be routed
        within the margin of it (producer clock skew, a router's lag behind the log, a producer's
        own delay). Why the upper bound: without it every window emitted while a shed was in force
        said "no estimate", the windows that closed just before the shed too (a fifth of a
        benchmark's shed-span rows). What it costs: a straggler routed more than the margin after
        its window ended, under a shed, and dropped, leaves a window that says exact while it
        missed it; a larger margin only makes more rows non-exact. Both ends come from the log up
        to the batch's end (its records' timestamps included), so a replay answers the same; each
        errs toward more epochs where a control record has no time. Rows with sampled records keep
        their Horvitz–Thompson estimates: those account for the records they lost."""
        if not self.view.sheds or not len(results):
            return
        latest = min(self.log_epoch(), self.view.epoch)
        if not self.processor.windowed:
            runs = np.unique(results.run).tolist()
            lowest = {run: self.view.lowest_keep(self.topics, run, latest) for run in runs}
            low = np.array([lowest[r] for r in results.run.tolist()], dtype=np.float64)
        else:
            margin = int(self.config.exact_margin_ms)
            unsampled = results.sampling().sampled == 0
            starts = results.window_start[unsampled].tolist()
            spans = set(zip(starts, results.window_end[unsampled].tolist(), strict=True))
            by_span = {
                (start, end): self.view.lowest_keep(
                    self.topics,
                    self.view.epoch_at_time(start - margin, latest),
                    self.view.last_epoch_at_time(end + margin, latest),
                )
                for start, end in spans
            }
            low = np.ones(len(results), dtype=np.float64)
            for i in np.flatnonzero(unsampled).tolist():
                low[i] = by_span[(results.window_start[i].item(), results.window_end[i].item())]
        if (low < 1.0).any():
            terms = results.sampling()
            terms.opaque_keep = np.where(low < 1.0, low, terms.opaque_keep)
            results.terms = terms

    # --- stats -------------------------------------------------------------------------------------

    def _stats(self, busy_s: float) -> dict[str, Any]:
        meta = self.meta
        lat = np.concatenate(self._latencies) if self._latencies else np.zeros(0)
        heavy = self._heavy()
        counts = self._counts
        return {
            "worker": self.me,
            "epoch": int(meta["known"]),
            "records": self._records,
            "busy_ms": busy_s * 1000.0,
            "state_bytes": int(sum(b[3] for b in meta["buckets"].values())),
            "state_keys": int(sum(b[2] for b in meta["buckets"].values())),
            "frontier_epoch": self.frontier.frontier,
            "watermark_ms": self.watermark,
            "step": int(meta["steps"]),
            "late_records": counts["late"] + counts["too-late"],
            "held_records": counts["held"],
            "pending_keys": len(meta["pending"]),
            "duplicate_chunks": counts["duplicate_chunks"],
            "heavy_state": heavy,
            "chunks_sent": self._sent,
            "chunks_installed": self._installed,
            "flow_latency_p50_ms": float(np.percentile(lat, 50)) if len(lat) else 0.0,
            "flow_latency_p99_ms": float(np.percentile(lat, 99)) if len(lat) else 0.0,
            "excluded_records": counts["excluded"],
            "refused_records": counts["future"],
            "violations": counts["misrouted"]
            + counts["frontier-violation"]
            + counts["misdirected-chunk"]
            + counts["misdirected-marker"]
            + counts["malformed"],
            "corrections": counts["corrections"],
            "state_buckets": len(meta["buckets"]),
            # the step's work, counted: the buckets it loaded or rewrote and the rows they hold (not
            # in WorkerStats; tests read them, and CPU time is bench-reduce-soak's to measure)
            "buckets_touched": len(self._loaded),
            "rows_touched": int(sum(len(t) for t in self._loaded.values())),
        }

    def _heavy(self) -> list[dict[str, Any]]:
        """The keys touched in the step with the most state rows (bytes estimated per row)."""
        if not self._touched_keys or not self._loaded:
            return []
        rows = Table.concat(list(self._loaded.values()))
        if not len(rows):
            return []
        per_row = max(
            1,
            sum(b[3] for b in self.meta["buckets"].values())
            // max(1, sum(b[2] for b in self.meta["buckets"].values())),
        )
        keys, counts = np.unique(rows.key, return_counts=True)
        top = np.argsort(-counts, kind="stable")[: self.config.heavy_keys]
        return [{"key": str(keys[i]), "bytes": int(counts[i] * per_row)} for i in top.tolist()]


def _new_pending() -> dict[str, Any]:
    return {"ship_at": -1, "ship_to": -1, "held": 0, "counts": {}}


def _piece(key: str, run: int, count: int, index: int) -> str:
    return f"{run}\x00{count}\x00{index}\x00{key}"


def dump_meta(meta: dict[str, Any]) -> bytes:
    import json

    return json.dumps(meta, sort_keys=True).encode()


def load_meta(blob: bytes | None) -> dict[str, Any] | None:
    import json

    return None if not blob else json.loads(blob)
