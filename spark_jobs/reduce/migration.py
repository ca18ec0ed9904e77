"""Live migration, one worker's side: markers advance the frontier and ship what an epoch moves
away; chunks install what arrives; a rehash's "shipment done" completes what no chunk will.

**New owner.** Records of a pending run are taken in at once: into partial rows (mergeable
processors, merged with the chunk when it comes) or appended to the held list (the others,
replayed onto the chunk's state). **Old owner.** Markers advance the frontier; when it passes an
epoch, the keys that epoch moves away are shipped, a run still pending being shipped the moment
its own chunk completes it.

A mixin of :class:`~spark_jobs.reduce.engine.WorkerStep` (its state and storage are the step's):
the moves are one concern, kept apart from folding records and from emission.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from spark_jobs.processors.table import Table
from spark_jobs.reduce.contract import DONE_KEY, ChunkOut, listed, piece_name
from spark_jobs.reduce.frontier import InputFrontier
from spark_jobs.reduce.store import HeldRecords
from spark_jobs.reduce.worker_meta import PendingRun


class Migration:
    """Markers, shipping and chunks (module docstring); mixed into ``WorkerStep``."""

    def _marker(self, r: pd.Series) -> None:
        if int(r["marker_worker"]) != self.me:
            self._dead(int(r["offset"]), r.get("raw"), "misdirected-marker",
                       f"marker for worker {int(r['marker_worker'])} in partition {self.me}")  # fmt: skip
            return
        covers = list(r["covers"]) if r["covers"] is not None else []
        for pid in covers:
            if pid not in self.frontier._known:  # a new input partition: it joins the frontier
                self.frontier = InputFrontier([*self.frontier.partitions, pid], self.frontier.seen)
                self.meta.inputs = sorted({*self.meta.inputs, pid} - set(self.config.input_partitions))
            self.clock.join(pid)
        self._progress(r, covers)
        # shed spans first: rows shipped below carry what they say
        for span in listed(r.get("shed")):
            if span["topic"] in self.topics:
                self._shed(int(span["first"]), int(span["last"]), float(span["keep"]))
        after = self.frontier.observe(int(r["epoch"]), covers)
        for epoch in range(self.meta.shipped + 1, after + 1):
            self._ship_epoch(epoch)
            self.meta.shipped = epoch

    def _ship_epoch(self, epoch: int) -> None:
        """Ship everything ``epoch`` moves away from this worker."""
        moving = [(k, old, new) for k, (old, new) in self.view.moves_at(epoch).items() if old == self.me]
        rehash = self.view.rehash_at(epoch)
        if rehash is not None:
            moving = self._rehash_moves(epoch)
            self.meta.owed_done.append(epoch)
        for key, _old, new in moving:
            self._ship(key, epoch, new)

    def _rehash_moves(self, epoch: int) -> list[tuple[str, int, int]]:
        """Every key held here (in state, held or pending) whose owner changes at ``epoch``."""
        rows = self._all_rows()
        keys = set(rows.key.tolist()) | set(self.meta.pending)
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
            entry = self.meta.await_run(key, start)
        if entry is not None:  # its own chunk has not come: ship when it does
            entry.ship_at, entry.ship_to = epoch, to
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
        blob = self._carry_shed(rows).to_bytes()
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
        closed = set(self.meta.closed)
        for epoch in self.meta.owed_done:
            earlier_open = any(e < epoch and e not in closed for e in self.view.rehash_epochs)
            waiting = earlier_open or any(
                self.view.run_end(key, run, epoch) is not None
                for key, runs in self.meta.pending.items()
                for run in runs
            )
            if waiting:
                still.append(epoch)
                continue
            for w in range(self.config.workers):
                if w != self.me:
                    self.out.chunks.append(ChunkOut(DONE_KEY, epoch, self.me, w, 0, 0, b""))
        self.meta.owed_done = still

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
            entry = self.meta.await_run(key, epoch)
        count, index = int(r["chunk_count"]), int(r["chunk_index"])
        blob = bytes(r["chunk_state"]) if r["chunk_state"] is not None else b""
        if count > 1:
            got = entry.pieces.setdefault(count, [])
            if index not in got:
                self.store.put_piece(piece_name(key, epoch, count, index), blob)
                got.append(index)
            if len(got) < count:
                return
            names = [piece_name(key, epoch, count, i) for i in range(count)]
            blob = b"".join(self.store.get_piece(name) or b"" for name in names)
        self._install(key, epoch, blob, sender, entry)

    def _install(self, key: str, run: int, blob: bytes, sender: int, entry: PendingRun) -> None:
        p = self.processor
        earlier = Table.from_bytes(self.schema, blob) if blob else Table.empty(self.schema)
        earlier.run = np.full(len(earlier), run, dtype=np.int64)  # the sender's run ids are its own
        partial = self._take_rows(key, run)
        if p.mergeable:
            state = p.merge(earlier, partial) if len(partial) else earlier
        else:
            # a non-mergeable run holds its records, not rows: its partial rows only count exclusions
            state = p.combine(Table.concat([earlier, partial]))
            held = self._take_held(key, run) if entry.held else HeldRecords.empty()
            if len(held):
                order = np.argsort(held.seq, kind="stable")
                h = held.take(order)
                state = p.fold(state, h.key, h.run, h.event_time, h.value)
                state = self._with_terms(state, h.key, h.run, h.event_time, h.keep, h.value)
        self._finish_pending(key, run, entry)
        if self._is_rehash_run(run):
            self.meta.receipt(run).installed.append(key)
        self._installed.append({"key": key, "epoch": run, "worker": sender, "bytes": len(blob)})
        # a run that ended while its state was on the way (the key moved on, a rehash came after)
        # goes on at once to the owner from its end: this worker's shipping for that epoch is past
        end = self.view.run_end(key, run, self.meta.shipped)
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

    def _finish_pending(self, key: str, run: int, entry: PendingRun) -> None:
        for count, got in entry.pieces.items():
            for index in got:
                self.store.remove_piece(piece_name(key, run, count, index))
        runs = self.meta.pending.get(key, {})
        runs.pop(run, None)
        if not runs:
            self.meta.pending.pop(key, None)
        self._load_all()  # its rows in every bucket may emit now: they are looked at this step

    def _done(self, epoch: int, sender: int) -> None:
        """A sender's "shipment done" for rehash epoch ``epoch``: its keys' runs here complete."""
        if epoch in self.meta.closed:
            self._counts["duplicate_chunks"] += 1
            return
        opened = self.meta.receipt(epoch)
        if sender in opened.done:
            self._counts["duplicate_chunks"] += 1
            return
        opened.done.append(sender)
        for key, runs in list(self.meta.pending.items()):
            entry = runs.get(epoch)
            if entry is None or self.view.owner(key, epoch - 1) != sender:
                continue
            self._install(key, epoch, b"", sender, entry)  # nothing to merge: complete with what is here
            self._installed.pop()  # not a chunk
        if len(opened.done) >= self.config.workers - 1:
            del self.meta.rehash[epoch]
            self.meta.closed.append(epoch)
