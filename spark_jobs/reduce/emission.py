"""When rows are written and what they may claim: event time, emission, exactness.

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

A mixin of :class:`~spark_jobs.reduce.engine.WorkerStep` (its state and storage are the step's).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from spark_jobs.processors.batch import Results
from spark_jobs.processors.table import Table
from spark_jobs.reduce.contract import listed


class Emission:
    """Event time, emission and exactness (module docstring); mixed into ``WorkerStep``."""

    def _progress(self, r: pd.Series, covers: list[str]) -> None:
        """The marker's event-time progress of each input partition it covers (a legacy router's
        marker carries none: its partitions follow their records, see EventClock)."""
        stamp = int(r["timestamp"])
        if bool(r.get("legacy") or False):
            for pid in covers:
                self.clock.mark_legacy(pid)
            return
        times = listed(r.get("cover_times"))
        for pid, event_ms in zip(covers, times, strict=False):
            self.clock.announce(pid, -1 if event_ms is None else int(event_ms), stamp)
        self._advance(stamp)

    def _advance(self, log_ms: int) -> None:
        """The watermark this far into the routed partition (at log time ``log_ms``). Why not only
        at the batch's end: a batch may end with records appended long after the last progress (a
        backlog read at once, chunks written again), and every partition would look idle then,
        holding the watermark where the batch began though every partition had advanced."""
        self.clock.saw_log_time(log_ms)
        self._reached = self.clock.watermark(self._reached)

    def _shed(self, first: int, last: int, keep: float) -> None:
        """A router shed records that would have come here with event times in [first, last]: no
        window overlapping that is exact. Rows already emitted as exact are written again (a
        correction that says so); later rows learn it at emission (``_opaque_terms``)."""
        p = self.processor
        if not p.windowed:
            return  # a per-key processor's windows are its own: its rows follow the settings' history
        self.spans.add(first, last, keep)
        size = p.windows.size_ms
        for start in list(self.meta.buckets):
            if start > last or start + size <= first:
                continue
            table = self._bucket(start)
            carried = table.columns["shed_keep"]
            fresh = carried >= 1.0
            reopen = fresh & (table.columns["revision"] >= 0) & (table.columns["sampled"] == 0)
            table.columns["shed_keep"] = np.minimum(carried, keep)
            if reopen.any():
                dirty = table.columns["dirty"].copy()
                dirty[reopen] = 1
                table.columns["dirty"] = dirty
            self._dirty.add(start)

    def _forget_old_spans(self) -> None:
        p = self.processor
        if self.spans and p.windowed:
            self.spans.prune(self.watermark - p.windows.size_ms - int(self.config.horizon_ms))

    def _carry_shed(self, rows: Table) -> Table:
        """``rows``, about to leave in a chunk, with what this worker knows was shed from them in
        ``shed_keep``: the spans overlapping their windows, or, for a per-key state, the lowest
        setting in force over its run here (the receiver's run starts later)."""
        if not len(rows):
            return rows
        p = self.processor
        if p.windowed:
            if not self.spans:
                return rows
            low = self.spans.lowest_keep(rows.window, p.window_end(rows))
        else:
            if not self.view.sheds:
                return rows
            latest = min(self.log_epoch(), self.view.epoch)
            lows = {r: self.view.lowest_keep(self.topics, r, latest) for r in np.unique(rows.run).tolist()}
            low = np.array([lows[r] for r in rows.run.tolist()], dtype=np.float64)
        rows.columns["shed_keep"] = np.minimum(rows.columns["shed_keep"], low)
        return rows

    def log_epoch(self) -> int:
        """The control log's end as this batch knows it: its CONTROL rows (the job reads the
        control topic as a second source, so a replayed batch reads the same end), or the highest
        epoch its own partition carried, whichever is later."""
        return max(self.meta.log_epoch, self.meta.known)

    def _may_emit(self, rows: Table) -> np.ndarray:
        """Per row: its run is complete here and has no known end (asked of the log as this batch
        read it, not only of the epochs this partition has carried)."""
        may = np.ones(len(rows), dtype=bool)
        if not len(rows):
            return may
        pending = self.meta.pending
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
        for b, bucket in list(self.meta.buckets.items()):
            if bucket.due <= wm or bucket.expire <= wm:
                self._bucket(b)
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
        so (``opaque_keep``: the lowest keep-probability they may have lost records under) instead
        of claiming to be exact.

        A windowed row with no record kept with p < 1 (``sampled == 0``) looks exact, but the
        records it lost may all have been dropped. It is exact only if no router reported shedding
        a record that would have come here with an event time in its window (:mod:`shed_spans`),
        here or where the row's state was before (``shed_keep``, carried in chunks). That is what
        routers did, not a guess from clocks. Rows with sampled records keep their
        Horvitz–Thompson estimates: those account for the records they lost.

        A per-key processor's windows are its own: its row is exact only if no setting below 1 was
        in force for the job's topics at any epoch of the state's history, from the start of the
        key's run here to the log's end as this batch read it, and before that wherever the
        state came from (``shed_keep``, set by the sender from its own run).

        While a router older than shed reports feeds this worker (a rolling upgrade), its drops
        are unreported: every windowed row without sampled records is judged as a per-key row
        from the log's first epoch on (conservative: exact only if nothing was ever shed)."""
        n = len(results)
        if not n:
            return
        low = results.carried_keep().copy()
        p = self.processor
        latest = min(self.log_epoch(), self.view.epoch)
        if p.windowed:
            unsampled = results.sampling().sampled == 0
            if self.spans:
                low = np.minimum(low, self.spans.lowest_keep(results.window_start, results.window_end))
            if self.view.sheds and self.clock.legacy():
                low = np.minimum(low, self.view.lowest_keep(self.topics, 0, latest))
            low = np.where(unsampled, low, 1.0)
        elif self.view.sheds:
            lows = {r: self.view.lowest_keep(self.topics, r, latest) for r in np.unique(results.run).tolist()}
            low = np.minimum(low, np.array([lows[r] for r in results.run.tolist()], dtype=np.float64))
        if (low < 1.0).any():
            terms = results.sampling()
            terms.opaque_keep = np.where(low < 1.0, low, terms.opaque_keep)
            results.terms = terms
