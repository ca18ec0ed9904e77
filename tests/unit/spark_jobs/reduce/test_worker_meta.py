"""The worker's persisted meta: every layout a checkpoint may hold is read right, and a newer one
is refused.

The version-1 blobs in ``meta_blobs/`` were written by the engine before the meta was typed (its
``dump_meta``): ``v1_new.json`` is a new worker's meta; ``v1_populated.json`` was taken mid-run
from the simulated cluster of test_engine_migration.py (LastValues, 64-byte chunks, a SCALE), then
given by hand, following that engine's field comments, what that run did not reach: a new input
partition, a pending run whose key moved on before its chunk came, an owed "shipment done" and two
shed spans (as the engine saved them: floats). What each field must read as is written below from
the blob itself, not from the codec.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_jobs.processors.aggregate import WindowAggregate
from spark_jobs.processors.windows import WindowSpec
from spark_jobs.reduce import worker_meta
from spark_jobs.reduce.worker_meta import (
    Bucket,
    ClockState,
    MetaVersionError,
    PartitionClock,
    PendingRun,
    RehashReceipt,
    ShedSpan,
    WorkerMeta,
)
from tests.support.engine_rows import Worker, data, emitted, marker, view_with

pytestmark = pytest.mark.unit

BLOBS = Path(__file__).parent / "meta_blobs"
NEVER = 9223372036854775807


def blob(name: str) -> bytes:
    return (BLOBS / name).read_bytes().strip()


def test_a_new_workers_meta_of_version_1_reads_as_a_new_meta() -> None:
    assert b'"version"' not in blob("v1_new.json")
    assert worker_meta.load(blob("v1_new.json")) == WorkerMeta()


def test_a_populated_meta_of_version_1_reads_with_every_field_right() -> None:
    meta = worker_meta.load(blob("v1_populated.json"))
    assert meta is not None
    assert meta.seen == {"in:0": 5, "in:1": 5, "in:2": 4}
    assert meta.inputs == ["in:2"]
    assert (meta.known, meta.log_epoch, meta.shipped, meta.steps, meta.watermark) == (5, 5, 5, 21, 6846)
    assert meta.closed == [2]
    assert meta.owed_done == [5]
    assert meta.pending == {
        "k3": {5: PendingRun(ship_at=-1, ship_to=-1, held=12, pieces={42: list(range(41))})},
        "k4": {5: PendingRun(held=4)},
        "k7": {5: PendingRun(held=3)},
        "k9": {4: PendingRun(ship_at=5, ship_to=1, held=0, pieces={2: [1]})},
    }
    assert meta.rehash == {5: RehashReceipt(done=[2], installed=["k13"])}
    assert meta.event == ClockState(
        log_ms=0,
        parts={
            "in:0": PartitionClock(progress=10354, advanced_at=0, legacy=False),
            "in:1": PartitionClock(progress=6966, advanced_at=0, legacy=False),
            "in:2": PartitionClock(progress=5900, advanced_at=0, legacy=True),
        },
    )
    assert meta.shed == [ShedSpan(6000, 6999, 0.5), ShedSpan(9000, 9999, 0.25)]
    assert all(type(s.first) is int and type(s.last) is int for s in meta.shed)
    assert len(meta.buckets) == 41
    assert meta.buckets[5800] == Bucket(due=NEVER, expire=6900, rows=3, stored_bytes=320)
    assert meta.buckets[10300] == Bucket(due=10400, expire=11400, rows=1, stored_bytes=127)
    raw = json.loads(blob("v1_populated.json"))["buckets"]
    assert meta.buckets == {int(b): Bucket(v[0], v[1], v[2], v[3]) for b, v in raw.items()}


def test_version_2_writes_the_same_keys_as_version_1_and_its_version() -> None:
    for name in ("v1_new.json", "v1_populated.json"):
        old = json.loads(blob(name))
        new = json.loads(worker_meta.dump(worker_meta.load(blob(name))))  # type: ignore[arg-type]
        assert new.pop("version") == 2
        if name == "v1_new.json":  # the clock's state of a new worker: {} then, its defaults now
            assert (old.pop("event"), new.pop("event")) == ({}, {"log": -1, "parts": {}})
        assert new == old  # a shed span's 6000.0 is 6000 now: equal as numbers


def test_older_engines_keys_read_as_that_engine_read_them() -> None:
    """Keys added after a checkpoint was written take their defaults (the engine filled them in);
    ``timer`` (the event-time timer's due time, no longer kept) is dropped."""
    raw = json.loads(blob("v1_populated.json"))
    for name in ("log_epoch", "watermark", "event", "shed"):
        del raw[name]
    raw["timer"] = 123
    meta = worker_meta.load(json.dumps(raw).encode())
    assert meta is not None
    assert (meta.log_epoch, meta.watermark, meta.event, meta.shed) == (0, 0, ClockState(), [])
    assert meta.known == 5 and meta.closed == [2]
    assert "timer" not in json.loads(worker_meta.dump(meta))


def test_no_meta_is_none() -> None:
    assert worker_meta.load(None) is None
    assert worker_meta.load(b"") is None


@pytest.mark.parametrize("version", [3, 17])
def test_a_meta_of_a_newer_version_is_refused_naming_it(version: int) -> None:
    raw = json.loads(worker_meta.dump(WorkerMeta(known=4)))
    raw["version"] = version
    with pytest.raises(MetaVersionError, match=rf"version {version}, written by a newer Ballast"):
        worker_meta.load(json.dumps(raw).encode())


@pytest.mark.parametrize("version", [0, -1, "2", None, True])
def test_a_version_no_ballast_writes_is_refused(version: object) -> None:
    raw = json.loads(worker_meta.dump(WorkerMeta()))
    raw["version"] = version
    with pytest.raises(MetaVersionError, match="which no Ballast writes"):
        worker_meta.load(json.dumps(raw).encode())


def test_a_damaged_version_2_meta_is_refused() -> None:
    raw = json.loads(worker_meta.dump(WorkerMeta()))
    del raw["pending"]
    raw["extra"] = 1
    with pytest.raises(MetaVersionError, match=r"lacks \['pending'\] and has unknown \['extra'\]"):
        worker_meta.load(json.dumps(raw).encode())
    with pytest.raises(MetaVersionError, match="not JSON"):
        worker_meta.load(b"{not json")
    with pytest.raises(MetaVersionError, match="not an object"):
        worker_meta.load(b"[1, 2]")


# --- round trip -----------------------------------------------------------------------------------

ints = st.integers(min_value=-(2**62), max_value=2**63 - 1)
small = st.integers(min_value=-1, max_value=10**6)
names = st.text(min_size=0, max_size=12)
pending_runs = st.builds(
    PendingRun,
    ship_at=small,
    ship_to=small,
    held=st.integers(min_value=0, max_value=10**6),
    pieces=st.dictionaries(st.integers(min_value=2, max_value=64), st.lists(st.integers(0, 63), max_size=8)),
)
metas = st.builds(
    WorkerMeta,
    seen=st.dictionaries(names, small),
    inputs=st.lists(names),
    known=small,
    log_epoch=small,
    shipped=small,
    buckets=st.dictionaries(ints, st.builds(Bucket, ints, ints, small, small)),
    pending=st.dictionaries(names, st.dictionaries(small, pending_runs, min_size=1)),
    rehash=st.dictionaries(small, st.builds(RehashReceipt, st.lists(small), st.lists(names))),
    closed=st.lists(small),
    owed_done=st.lists(small),
    steps=st.integers(min_value=0, max_value=2**40),
    watermark=ints,
    event=st.builds(
        ClockState, small, st.dictionaries(names, st.builds(PartitionClock, ints, small, st.booleans()))
    ),
    shed=st.lists(
        st.builds(
            ShedSpan,
            st.integers(0, 2**50),
            st.integers(0, 2**50),
            st.floats(min_value=0.0, max_value=1.0, allow_nan=False),
        )
    ),
)


@settings(max_examples=300, deadline=None)
@given(metas)
def test_dump_then_load_is_the_identity(meta: WorkerMeta) -> None:
    before = copy.deepcopy(meta)
    written = worker_meta.dump(meta)
    assert meta == before  # dumping changes nothing
    assert worker_meta.load(written) == meta
    assert json.loads(written)["version"] == worker_meta.VERSION


# --- the engine on a version-1 meta ----------------------------------------------------------------


def test_a_worker_resumed_from_its_version_1_meta_goes_on_as_if_never_stopped() -> None:
    """The next step of a worker whose meta went through the old layout (as a checkpoint written
    before versioning holds it) writes what the same step of the uninterrupted worker writes."""
    view = view_with({"a": 1})  # key a moves to worker 1 at epoch 1
    w = Worker(0, view, WindowAggregate(WindowSpec(1_000)))
    w.step([marker(0, 0), data("a", 1.0, 100, 0), data("b", 2.0, 200, 0), data("b", 3.0, 1_500, 0)])
    meta = copy.deepcopy(w.meta)
    assert meta is not None and meta.buckets and meta.event.parts
    v1 = json.loads(worker_meta.dump(meta))
    del v1["version"]
    v1["shed"] = [[float(a), float(b), k] for a, b, k in v1["shed"]]
    resumed = Worker(0, view, WindowAggregate(WindowSpec(1_000)))
    resumed.store, resumed.offset = copy.deepcopy(w.store), w.offset
    resumed.meta = worker_meta.load(json.dumps(v1).encode())
    rows = [marker(1, 0), data("b", 4.0, 1_600, 0)]
    went_on = w.step(copy.deepcopy(rows), watermark=2_000)
    again = resumed.step(copy.deepcopy(rows), watermark=2_000)
    assert emitted(again) == emitted(went_on)
    assert emitted(went_on), "nothing was emitted: the comparison says nothing"
    assert [(c.key, c.epoch, c.to_worker, c.state) for c in again.chunks] == [
        (c.key, c.epoch, c.to_worker, c.state) for c in went_on.chunks
    ]
    assert went_on.chunks, "nothing was shipped: the comparison says nothing"
    assert worker_meta.dump(resumed.meta) == worker_meta.dump(w.meta)
