"""The Spark side of a worker: a ``transformWithStateInPandas`` processor around :class:`WorkerStep`.

Why this is thin: everything that decides something lives in :mod:`spark_jobs.reduce.engine`,
which tests without Spark. Here only the grouping key becomes a worker number, the worker's state
goes in and out of Spark's state store (RocksDB, checkpointed with the offsets, so a restart
resumes both together), the control log is followed to its end (the emission rule asks it as of
now), the input topics' partitions are looked up (a partition added while the job runs joins the
frontier), the records of the step's dead letters are read back from the routed topic (a letter
carries its record), and no timer is kept: a worker's watermark moves only with its rows.
The control log's end comes in the data (``CONTROL`` rows, :func:`spark_jobs.reduce.job.control_rows`:
the offsets of the control records the batch read, resolved here to the epoch after them,
:func:`resolve_log_end`), so a replayed batch folds the log to the same epoch.

State, per worker (:mod:`spark_jobs.reduce.store`), all in one map state (:class:`_SparkStore`):
buckets (window start -> encoded rows), the engine's meta, held record blocks, chunk pieces;
every value cut in pieces of at most 32 KB (:class:`PiecedMap`: Spark 4.0.0 could not take a larger
one reliably; kept for the checkpoints stored so).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle

from ballast.kafka.configuration import KafkaConfig
from spark_jobs.processors.batch import batch_processor
from spark_jobs.processors.spec import from_spec
from spark_jobs.reduce import worker_meta
from spark_jobs.reduce.contract import BAD, CONTROL, WorkerConfig
from spark_jobs.reduce.engine import WorkerStep
from spark_jobs.reduce.frontier import partition_id
from spark_jobs.reduce.letters import shared_records, with_records
from spark_jobs.reduce.outputs import OutputEncoder
from spark_jobs.reduce.ownership_log import OwnershipLog, shared_log
from spark_jobs.reduce.store import HeldRecords

INPUTS_TTL_S = 10.0  # how long a worker trusts its last look at the input topics' partitions


@dataclass(frozen=True)
class JobSpec:
    """Everything a worker task needs, pickled once with the processor when the query starts."""

    job: str  # the job id: its checkpoint's owner, written into every chunk it sends
    kafka: KafkaConfig  # the connection (security included) of the driver, for the executors too
    topics: dict[str, str]  # role -> topic name (ballast.kafka.topics roles)
    routed_partitions: int
    labels: tuple[int, ...]  # labels[w]: the grouping value of worker w (spark_jobs.reduce.placement)
    processor: str  # a spark_jobs.processors spec, e.g. "aggregate:size=10s"
    input_partitions: tuple[str, ...]
    group_prefix: str  # groupIdPrefix of its Kafka sources: <prefix>.reduce (ballast.kafka.identities)
    input_topics: tuple[str, ...] = ()
    bins: int = 64  # hash bins of a per-key processor's states
    chunk_bytes: int = 512 * 1024
    control_timeout_s: float = 60.0
    record_cost_us: float = 0.0
    record_cost_kind: str = "sleep"
    horizon_ms: int = 0
    max_future_ms: int = 0
    watermark_delay_ms: int = 0
    idle_timeout_ms: int = 0


PIECE_BYTES = 32 * 1024  # the largest value one state call carries (see PiecedMap)
# what an entry of the worker's one map state holds: its key is (kind, id, name, piece)
BUCKET, HELD, CHUNK_PIECE, META, HELD_INDEX = range(5)


def state_schemas() -> tuple[Any, Any]:
    """Key and value schema of the worker's map state, as types (a DDL string costs a call into
    the JVM to parse, per state variable and task)."""
    from pyspark.sql.types import BinaryType, IntegerType, LongType, StringType, StructField, StructType

    key = StructType(
        [
            StructField("kind", IntegerType()),
            StructField("id", LongType()),
            StructField("name", StringType()),
            StructField("piece", IntegerType()),
        ]
    )
    value = StructType([StructField("blob", BinaryType()), StructField("pieces", IntegerType())])
    return key, value


class PiecedMap:
    """Values of any size in a Spark map state, as pieces of at most ``piece_bytes``.

    Why: Spark 4.0.0's state server reads a state call from its socket with one ``read``, not
    ``readFully`` (SPARK-53870; 4.2.0, which Ballast runs on now, reads with ``readFully``): a
    call larger than what has reached the socket when the JVM reads it is parsed half-filled, and
    the task fails ("invalid pickle opcode"). A worker's bucket of 1,250 keys is about 100 KB; on
    the loaded benchmark machine one run in three failed so. A piece of 32 KB, with its framing,
    goes to the socket in one write and over loopback in one segment, so the JVM finds it whole.
    Kept for stored checkpoints: every checkpoint written so far holds its values in pieces, and
    4.2.0 no longer needs them.

    Key: the value's own key fields (``ident``), then the piece index; value: the piece and the
    number of pieces (kept in every piece, read from the first). Reading joins the pieces;
    writing writes them and removes pieces left over from a longer value. Counts learned in a
    step are remembered for that step only (one instance per step: a retried batch starts again
    from the store).
    """

    def __init__(self, state: Any, piece_bytes: int = PIECE_BYTES) -> None:
        self.state = state
        self.piece_bytes = piece_bytes
        self._counts: dict[tuple, int] = {}

    def get(self, ident: tuple) -> bytes | None:
        first = self.state.getValue((*ident, 0))
        if first is None:
            self._counts[ident] = 0
            return None
        count = int(first[1])
        parts = [bytes(first[0])]
        for i in range(1, count):
            piece = self.state.getValue((*ident, i))
            if piece is None:
                raise RuntimeError(f"state value {ident}: piece {i} of {count} is missing")
            parts.append(bytes(piece[0]))
        self._counts[ident] = count
        return b"".join(parts)

    def put(self, ident: tuple, blob: bytes) -> None:
        size = self.piece_bytes
        count = max(1, -(-len(blob) // size))
        for i in range(count):
            self.state.updateValue((*ident, i), (bytearray(blob[i * size : (i + 1) * size]), count))
        self._drop(ident, count)
        self._counts[ident] = count

    def remove(self, ident: tuple) -> None:
        self._drop(ident, 0)
        self._counts[ident] = 0

    def _drop(self, ident: tuple, keep: int) -> None:
        """Remove the pieces from ``keep`` on (asked of the store when the count is not known)."""
        known = self._counts.get(ident)
        if known is not None:
            for i in range(keep, known):
                self.state.removeKey((*ident, i))
            return
        i = keep
        while self.state.containsKey((*ident, i)):
            self.state.removeKey((*ident, i))
            i += 1


class _SparkStore:
    """:class:`~spark_jobs.reduce.store.StateStore` over a worker's one map state (see
    :class:`PiecedMap`): buckets, held record blocks and chunk pieces as kinds of entry.

    Why one state variable: Spark builds each state variable anew in every task (its encoders
    generated and compiled, ``initializeStateVariable``: 8 % of the JVM's CPU in a 100,000-record
    batch with four of them, measured with Java Flight Recorder). The held blocks are listed in
    an entry of their own (``HELD_INDEX``), so reading them never iterates over the buckets.
    """

    def __init__(self, entries: PiecedMap) -> None:
        self._entries = entries

    def get_bucket(self, bucket: int) -> bytes | None:
        return self._entries.get((BUCKET, int(bucket), ""))

    def put_bucket(self, bucket: int, blob: bytes) -> None:
        self._entries.put((BUCKET, int(bucket), ""), blob)

    def remove_bucket(self, bucket: int) -> None:
        self._entries.remove((BUCKET, int(bucket), ""))

    def _held_blocks(self) -> list[int]:
        blob = self._entries.get((HELD_INDEX, 0, ""))
        return np.frombuffer(blob, dtype="<i8").tolist() if blob else []

    def append_held(self, held: HeldRecords) -> None:
        # a block's id: its first record's routed offset (unique within the worker's partition)
        block = int(held.seq.min())
        self._entries.put((HELD, block, ""), held.to_bytes())
        blocks = [b for b in self._held_blocks() if b != block] + [block]
        self._entries.put((HELD_INDEX, 0, ""), np.array(blocks, dtype="<i8").tobytes())

    def held(self) -> HeldRecords:
        parts = []
        for block in self._held_blocks():
            blob = self._entries.get((HELD, block, ""))
            if blob is None:
                raise RuntimeError(f"held block {block} is listed but not stored")
            parts.append(HeldRecords.from_bytes(blob))
        return HeldRecords.concat(parts)

    def replace_held(self, held: HeldRecords) -> None:
        for block in self._held_blocks():
            self._entries.remove((HELD, block, ""))
        self._entries.remove((HELD_INDEX, 0, ""))
        if len(held):
            self.append_held(held)

    def get_piece(self, name: str) -> bytes | None:
        return self._entries.get((CHUNK_PIECE, 0, name))

    def put_piece(self, name: str, blob: bytes) -> None:
        self._entries.put((CHUNK_PIECE, 0, name), blob)

    def remove_piece(self, name: str) -> None:
        self._entries.remove((CHUNK_PIECE, 0, name))


_INPUTS: dict[tuple[Any, tuple[str, ...]], tuple[float, tuple[str, ...]]] = {}


def current_inputs(kafka: KafkaConfig, topics: tuple[str, ...]) -> tuple[str, ...]:
    """Every partition of the input topics as the cluster has them now (cached per worker process
    for :data:`INPUTS_TTL_S`: far shorter than a router takes to notice a new partition)."""
    if not topics:
        return ()
    key = (kafka.connection, topics)
    cached = _INPUTS.get(key)
    if cached is not None and time.monotonic() - cached[0] < INPUTS_TTL_S:
        return cached[1]
    from ballast.kafka.admin import make_admin

    metadata = make_admin(kafka.with_client_id("ballast-reduce-inputs")).list_topics(timeout=10)
    found = tuple(
        partition_id(t, p)
        for t in topics
        if t in metadata.topics
        for p in sorted(metadata.topics[t].partitions)
    )
    _INPUTS[key] = (time.monotonic(), found)
    return found


def forget_archive_importers() -> None:
    """Forget the import finders of the zip archives on this Python worker's path, and the jars.

    Why: PySpark begins every task with ``importlib.invalidate_caches()``
    (``pyspark.worker_util.setup_spark_files``), and every zip importer in Python's finder cache
    then reads its archive's whole directory again, in Python. A reduce worker has about fifteen:
    one per package imported from ``pyspark.zip`` (1,220 entries each time) and one for Spark's
    ``spark-core`` jar (5,261 entries, no Python in it), which Spark puts on its workers' path.
    That was 60-75 % of a worker's Python CPU in a 100,000-record batch (py-spy), 0.06-0.1 s
    per task on a quiet machine, eight tasks a batch. The archives never change while a worker
    lives: a finder forgotten here is made again, from the directory Python keeps in memory, by
    the next import that needs it, so after a worker's first tasks the next ones read nothing.
    """
    import sys
    import zipimport

    for path in [p for p in sys.path if p.endswith(".jar")]:
        sys.path.remove(path)
    for path, finder in list(sys.path_importer_cache.items()):
        if isinstance(finder, zipimport.zipimporter):
            del sys.path_importer_cache[path]


def resolve_log_end(frame: pd.DataFrame, log: OwnershipLog, timeout: float) -> pd.DataFrame:
    """``frame`` with its ``CONTROL`` rows' epoch set to the log's epoch after the control records
    they name (by offset), not the epoch their records' keys claim: a record anyone produced to the
    control topic must not make the worker wait for an epoch the log never reaches. Rows from
    before control rows carried their offset (offset < 0) keep their epoch."""
    control = frame["kind"].to_numpy() == CONTROL
    if not control.any():
        return frame
    offsets = frame["offset"].to_numpy()[control]
    if int(offsets.max()) < 0:
        return frame
    end = log.epoch_through(int(offsets.max()), timeout)
    epochs = frame["epoch"].to_numpy().copy()
    epochs[control] = end
    return frame.assign(epoch=epochs)


class WorkerProcessor(StatefulProcessor):
    """One instance per task; the grouping key is a worker label."""

    def __init__(self, spec: JobSpec) -> None:
        self.spec = spec

    def init(self, handle: StatefulProcessorHandle) -> None:
        forget_archive_importers()
        self.handle = handle
        # one map state for everything (see _SparkStore), every value in pieces (PiecedMap)
        self.entries = handle.getMapState("entries", *state_schemas())
        self.processor = batch_processor(from_spec(self.spec.processor))
        self.worker_of = {label: w for w, label in enumerate(self.spec.labels)}
        self.log = shared_log(
            self.spec.kafka.with_client_id("ballast-reduce-control"),
            self.spec.topics["control"],
            self.spec.routed_partitions,
        )

    def handleInputRows(self, key, rows, timerValues) -> Iterator[pd.DataFrame]:
        frame = pd.concat(list(rows), ignore_index=True)
        yield self._step(int(key[0]), frame)

    def _step(self, label: int, frame: pd.DataFrame) -> pd.DataFrame:
        from pyspark import TaskContext

        worker = self.worker_of[label]
        spec = self.spec
        entries = PiecedMap(self.entries)
        meta = worker_meta.load(entries.get((META, 0, "")))  # refuses a newer Ballast's layout
        known = max(meta.known, meta.log_epoch) if meta is not None else 0
        frame = resolve_log_end(frame, self.log, spec.control_timeout_s)
        valid = frame["kind"].to_numpy() != BAD  # data, markers, chunks and the log's end
        if valid.any():
            known = max(known, int(np.max(frame["epoch"].to_numpy()[valid])))
        # the view answers questions up to `known` only (the engine asks of the log's end as the
        # batch read it), so a view folded further by now changes no answer of a replay
        view = self.log.ensure(known, spec.control_timeout_s)
        config = WorkerConfig(
            worker,
            spec.input_partitions,
            spec.job,
            workers=spec.routed_partitions,
            chunk_bytes=spec.chunk_bytes,
            record_cost_s=spec.record_cost_us / 1e6,
            record_cost_kind=spec.record_cost_kind,
            horizon_ms=spec.horizon_ms,
            max_future_ms=spec.max_future_ms,
            watermark_delay_ms=spec.watermark_delay_ms,
            idle_timeout_ms=spec.idle_timeout_ms,
        )
        store = _SparkStore(entries)
        inputs = current_inputs(spec.kafka, spec.input_topics)
        step = WorkerStep(config, self.processor, view, store, meta, extra_inputs=inputs)
        # no timers: a worker's watermark moves only with its rows (markers), so it is stepped
        # whenever it can change (docs/reduce.md, "Time")
        result = step.run(frame)
        if result.dead:  # each letter carries its record (spark_jobs.reduce.letters)
            result.dead = with_records(result.dead, shared_records(spec.kafka, spec.topics["routed"]), worker)
        context = TaskContext.get()
        result.stats["spark_partition"] = context.partitionId() if context is not None else -1
        result.stats["control_records_skipped"] = sum(self.log.skipped.values())
        entries.put((META, 0, ""), worker_meta.dump(result.meta))
        return OutputEncoder(spec.topics, worker, spec.job).frame(result, int(time.time() * 1000))

    def close(self) -> None:
        pass
