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

**Records left out** are dead-lettered with their reason and counted: ``late`` (older than the
watermark; counted in each of its windows' rows, a correction if the window was emitted),
``too-late`` (its windows are past the correction horizon), ``future`` (further ahead of the
batch's processing time than ``max_future_ms``: one bad clock must not move the watermark),
``misrouted`` (not this worker's key at its epoch), ``frontier-violation`` (a record of a run
already shipped: an unfenced router broke the frontier rule). None stops the job.

Everything is a function of (stored state, rows, watermark, the control log up to the end the
rows carry): a micro-batch replayed after a crash writes the same chunks and results, and the
receiver applies a chunk once.

Migration (markers, shipping, chunks, installs) lives in :mod:`spark_jobs.reduce.migration`;
event time, emission and what a row may claim in :mod:`spark_jobs.reduce.emission`; the step's
working copy of its stored buckets and held records in :mod:`spark_jobs.reduce.step_storage`; the
rows and outputs the step speaks in :mod:`spark_jobs.reduce.contract`; what it keeps from one
batch to the next besides its rows (the meta, typed and versioned) in
:mod:`spark_jobs.reduce.worker_meta`.
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

import numpy as np
import pandas as pd

from spark_jobs.processors.batch import NEVER, BatchProcessor, Results
from spark_jobs.processors.sampling import record_terms
from spark_jobs.processors.table import Table
from spark_jobs.record_cost import pay
from spark_jobs.reduce.contract import (
    BAD,
    CHUNK,
    CONTROL,
    DATA,
    MARKER,
    DeadLetter,
    StepResult,
    WorkerConfig,
)
from spark_jobs.reduce.emission import Emission
from spark_jobs.reduce.event_time import EventClock
from spark_jobs.reduce.frontier import InputFrontier
from spark_jobs.reduce.migration import Migration
from spark_jobs.reduce.ownership import OwnershipView
from spark_jobs.reduce.shed_spans import ShedSpans
from spark_jobs.reduce.step_storage import StepStorage
from spark_jobs.reduce.store import StateStore
from spark_jobs.reduce.worker_meta import PendingRun, WorkerMeta


class WorkerStep(StepStorage, Migration, Emission):
    """One micro-batch (or one timer firing) of one worker; build a new one per call."""

    def __init__(
        self,
        config: WorkerConfig,
        processor: BatchProcessor,
        view: OwnershipView,
        store: StateStore,
        meta: WorkerMeta | None,
        extra_inputs: tuple[str, ...] = (),
    ) -> None:
        self.config = config
        self.me = config.worker
        self.processor = processor
        self.schema = processor.schema()
        self.view = view
        self.store = store
        self.meta = meta if meta is not None else WorkerMeta()
        inputs = sorted(set(config.input_partitions) | set(self.meta.inputs) | set(extra_inputs))
        self.meta.inputs = [p for p in inputs if p not in config.input_partitions]
        self.frontier = InputFrontier(inputs, self.meta.seen)
        self.clock = EventClock(inputs, self.meta.event, config.watermark_delay_ms, config.idle_timeout_ms)
        self.spans = ShedSpans(self.meta.shed)
        # the job's input topics: a record that does not name its own is from the only one (if one)
        self.topics = tuple(sorted({pid.rsplit(":", 1)[0] for pid in inputs}))
        self._topic = self.topics[0] if len(self.topics) == 1 else ""
        self._init_storage()
        self.out = StepResult()
        self._results: list[Results] = []
        self._sent: list[dict[str, Any]] = []
        self._installed: list[dict[str, Any]] = []
        self._counts: dict[str, int] = defaultdict(int)
        self._latencies: list[np.ndarray] = []
        self._records = 0
        self._touched_keys: set[str] = set()

    # --- the step -----------------------------------------------------------------------------------

    def run(self, rows: pd.DataFrame | None, now_ms: int | None = None) -> StepResult:
        """Process ``rows`` (None: nothing new), then emit every row the watermark closed.

        Records are judged late against the watermark the batch began with (what the worker knew
        before them); the markers it reads may raise it, and emission uses the raised one."""
        started = time.perf_counter()
        self.now_ms = int(time.time() * 1000) if now_ms is None else int(now_ms)
        self.watermark = self.meta.watermark
        self._reached = self.watermark  # raised marker by marker as progress is read
        if rows is not None and len(rows):
            control = rows["kind"].to_numpy() == CONTROL
            if control.any():
                ends = rows["epoch"].to_numpy()[control]
                self.meta.log_epoch = max(self.meta.log_epoch, int(ends.max()))
                rows = rows[~control]
        if rows is not None and len(rows):
            rows = rows.sort_values("offset", kind="stable").reset_index(drop=True)
            self._consume(rows)
            self.clock.saw_log_time(int(rows["timestamp"].to_numpy().max()))
        self.watermark = self.clock.watermark(self._reached)
        self._settle_owed_done()
        self._emit_due()
        self._forget_old_spans()  # after emission: a window the watermark just passed uses them
        self._flush()
        meta = self.meta
        meta.watermark = int(self.watermark)
        meta.event = self.clock.state()
        meta.shed = self.spans.saved()
        meta.seen = self.frontier.seen
        meta.steps += 1
        dues = [d for b in meta.buckets.values() for d in (b.due, b.expire) if d < NEVER]
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
        known = self.meta.known
        if epoch <= known:
            return
        for e in range(known + 1, epoch + 1):
            for key, (_old, new) in self.view.moves_at(e).items():
                if new == self.me:
                    self.meta.await_run(key, e)
        self.meta.known = epoch

    def _pending(self, key: str, run: int) -> PendingRun | None:
        return self.meta.pending_run(key, run)

    def _rehash_complete(self, key: str, run: int) -> bool:
        """Whether a run started by a rehash needs no chunk any more (done, installed or closed)."""
        if run in self.meta.closed:
            return True
        opened = self.meta.rehash.get(run)
        if opened is None:
            return False
        return key in opened.installed or self.view.owner(key, run - 1) in opened.done

    def _is_rehash_run(self, run: int) -> bool:
        return run > 0 and self.view.rehash_at(run) is not None

    def _status(self, keys: np.ndarray, runs: np.ndarray) -> np.ndarray:
        """Per record: True when its run is complete here, False when it waits for its chunk (a
        rehash run not known complete becomes pending here)."""
        complete = np.ones(keys.size, dtype=bool)
        candidates = np.flatnonzero(runs > 0) if not self.meta.pending else np.arange(keys.size)
        for i in candidates.tolist():
            key, run = str(keys[i]), int(runs[i])
            if self._pending(key, run) is not None:
                complete[i] = False
            elif run > 0 and self._is_rehash_run(run) and not self._rehash_complete(key, run):
                self.meta.pending.setdefault(key, {})[run] = PendingRun()
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
        if "legacy" in block:
            legacy = block["legacy"].to_numpy(dtype=bool)
            if legacy.any():
                ok &= ~self._legacy_records(block, legacy, t, stamps, offsets, raw)
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
            pay(keys.size * c.record_cost_s, c.record_cost_kind)
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
                self._pending(str(key), int(r)).held += 1  # type: ignore[union-attr]

    def _legacy_records(
        self, block: pd.DataFrame, legacy: np.ndarray, t: np.ndarray, stamps: np.ndarray, offsets: np.ndarray,
        raw: np.ndarray,
    ) -> np.ndarray:  # fmt: skip
        """Records of routers older than event-time progress in markers: their event times move
        their input partition's progress here (clamped to the routed timestamp plus
        ``max_future_ms``), and those further ahead than that are refused as ``future`` (this
        version's routers refuse them before routing). Returns the refused ones."""
        mf = int(self.config.max_future_ms)
        future = legacy & (t > stamps + mf) if mf > 0 else np.zeros(t.size, dtype=bool)
        for i in np.flatnonzero(future).tolist():
            self._dead(int(offsets[i]), raw[i], "future",
                       f"event_time {int(t[i])} is more than {mf} ms after the record was routed "
                       f"({int(stamps[i])})")  # fmt: skip
        if "source_partition" in block:
            topics = block["source_topic"].to_numpy(dtype=object) if "source_topic" in block else None
            parts = block["source_partition"].to_numpy()
            clamped = np.minimum(t, stamps + mf) if mf > 0 else t
            for i in np.flatnonzero(legacy & ~future).tolist():
                topic = topics[i] if topics is not None and isinstance(topics[i], str) else self._topic
                self.clock.announce_legacy(f"{topic}:{int(parts[i])}", int(clamped[i]), int(stamps[i]))
            if (legacy & ~future).any():
                self._advance(int(stamps[legacy & ~future].max()))
        return future

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
        shipped = self.meta.shipped
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

    # --- stats -------------------------------------------------------------------------------------

    def _stats(self, busy_s: float) -> dict[str, Any]:
        meta = self.meta
        lat = np.concatenate(self._latencies) if self._latencies else np.zeros(0)
        heavy = self._heavy()
        counts = self._counts
        return {
            "worker": self.me,
            "epoch": meta.known,
            "records": self._records,
            "busy_ms": busy_s * 1000.0,
            "state_bytes": int(sum(b.stored_bytes for b in meta.buckets.values())),
            "state_keys": int(sum(b.rows for b in meta.buckets.values())),
            "frontier_epoch": self.frontier.frontier,
            "watermark_ms": self.watermark,
            "step": meta.steps,
            "late_records": counts["late"] + counts["too-late"],
            "held_records": counts["held"],
            "pending_keys": len(meta.pending),
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
            "state_buckets": len(meta.buckets),
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
            sum(b.stored_bytes for b in self.meta.buckets.values())
            // max(1, sum(b.rows for b in self.meta.buckets.values())),
        )
        keys, counts = np.unique(rows.key, return_counts=True)
        top = np.argsort(-counts, kind="stable")[: self.config.heavy_keys]
        return [{"key": str(keys[i]), "bytes": int(counts[i] * per_row)} for i in top.tolist()]


