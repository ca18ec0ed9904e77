"""The metrics topic, typed: every body round-trips through the schema into its dataclass, older
records decode with the new fields at their defaults, and the reduce's progress says what it read."""

from __future__ import annotations

import json

import pytest

from ballast.avro.codec import AvroCodec, SchemaStore, SchemaVersion
from ballast.metrics.records import (
    ChunkMove,
    HeavyHitter,
    LagSample,
    ReduceProgress,
    RouterKeyStats,
    WorkerStats,
    body_of,
    metric_of,
    metrics_record,
)
from ballast.paths import SCHEMAS_DIR

CODEC = AvroCodec("io.ballast.MetricsRecord")

ROUTER = {
    "epoch": 3,
    "first_epoch": 2,
    "worker_records": [5, 0, 7],
    "worker_bytes": [50, 0, 70],
    "offered_records": 13,
    "kept_records": 12,
    "dead_lettered": 1,
    "heavy_hitters": [{"key": "k1", "count": 6, "error": 1}],
    "sketch_capacity": 100,
    "sketch_records": 12,
}
WORKER = {
    "worker": 2,
    "epoch": 3,
    "records": 40,
    "busy_ms": 12.5,
    "state_bytes": 900,
    "state_keys": 9,
    "chunks_sent": [{"key": "k1", "epoch": 3, "worker": 5, "bytes": 64}],
    "chunks_installed": [],
    "pending_keys": 1,
}
PROGRESS = {
    "job": "j",
    "batch_id": 7,
    "input_rows": 1000,
    "durations_ms": {"triggerExecution": 2500, "addBatch": 2000},
    "end_offsets": [10, 20, -1],
    "watermark_ms": 123,
    "processed_rows_per_s": 400.0,
    "latest_offsets": [12, 20, -1],
}
LAG = {
    "group": "g",
    "topic": "t",
    "partition": 0,
    "committed_offset": 5,
    "end_offset": 9,
    "lag_records": 4,
    "lag_seconds": 0.5,
}


@pytest.mark.parametrize(
    ("branch", "raw", "cls"),
    [
        ("RouterKeyStats", ROUTER, RouterKeyStats),
        ("WorkerStats", WORKER, WorkerStats),
        ("ReduceProgress", PROGRESS, ReduceProgress),
        ("LagSample", LAG, LagSample),
    ],
)
def test_every_body_round_trips_through_the_schema_into_its_type(branch, raw, cls):
    value = CODEC.encode(metrics_record("src/x", 100, 200, branch, raw))
    metric = metric_of(CODEC.decode(value))
    assert (metric.source, metric.interval_start, metric.interval_end) == ("src/x", 100, 200)
    assert type(metric.body) is cls
    for name, expected in raw.items():
        got = getattr(metric.body, name)
        if name == "heavy_hitters":
            assert got == [HeavyHitter("k1", 6, 1)]
        elif name.startswith("chunks_"):
            assert got == [ChunkMove(**c) for c in expected]
        else:
            assert got == expected, name


def test_fields_a_newer_writer_adds_are_ignored_and_missing_ones_take_defaults():
    body = body_of("io.ballast.WorkerStats", {**WORKER, "a_field_from_the_future": 1})
    assert isinstance(body, WorkerStats) and body.late_records == 0 and body.frontier_epoch == -1
    with pytest.raises(ValueError, match="unknown metrics body"):
        body_of("io.ballast.Nope", {})


def test_reduce_progress_of_the_previous_release_decodes_without_latest_offsets():
    """``metrics.v6`` is the schema before ``latest_offsets``: its records still decode, with ``[]``."""
    v6 = SchemaVersion.from_json(json.loads((SCHEMAS_DIR / "previous" / "metrics.v6.avsc").read_text()))
    old = {k: v for k, v in PROGRESS.items() if k != "latest_offsets"}
    value = AvroCodec("io.ballast.MetricsRecord", SchemaStore([v6])).encode(
        metrics_record("j/driver", 1, 2, "ReduceProgress", old)
    )
    body = metric_of(CODEC.decode(value)).body
    assert isinstance(body, ReduceProgress) and body.latest_offsets == [] and body.end_offsets == [10, 20, -1]
    assert CODEC.schema.fingerprint != v6.fingerprint


def test_reduce_progress_covers_only_what_every_partition_read():
    progress = ReduceProgress.of(PROGRESS)
    assert progress.covers({0: 10, 1: 20})
    assert progress.covers({0: 0, 1: 5, 2: 0})  # an empty partition needs nothing read
    assert not progress.covers({0: 11})
    assert not progress.covers({2: 1})  # unknown (-1) is not read
    assert not progress.covers({3: 1})  # a partition the batch did not know


def test_lag_sample_of_the_previous_release_decodes_with_its_new_fields_defaulted():
    """``metrics.v7`` is the schema before LagSample's stage, status and rates: its samples still decode."""
    v7 = SchemaVersion.from_json(json.loads((SCHEMAS_DIR / "previous" / "metrics.v7.avsc").read_text()))
    value = AvroCodec("io.ballast.MetricsRecord", SchemaStore([v7])).encode(
        metrics_record("shedder", 1, 2, "LagSample", LAG)
    )
    body = metric_of(CODEC.decode(value)).body
    assert isinstance(body, LagSample) and (body.lag_records, body.lag_seconds) == (4, 0.5)
    assert (body.stage, body.status, body.group_status, body.arrival_rate) == ("", "", "", 0.0)
    assert CODEC.schema.fingerprint != v7.fingerprint
    full = {**LAG, "stage": "router", "status": "WARN", "group_status": "STALL", "arrival_rate": 3.5,
            "service_rate": 1.0}  # fmt: skip
    again = metric_of(CODEC.decode(CODEC.encode(metrics_record("s", 1, 2, "LagSample", full)))).body
    assert again == LagSample(**full)
