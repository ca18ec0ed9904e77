"""The partition stage's output, judged exactly once: every window a read_committed reader sees,
and the rule that each closed window is there once and equals a pandas reference."""

from __future__ import annotations

import pandas as pd

from ballast.avro.codec import AvroCodec
from ballast.kafka.configuration import KafkaConfig
from ballast.kafka.follow import TopicFollower

FIGURES = ["count", "sum", "min", "max"]


def window_reference(records: pd.DataFrame, window_ms: int) -> pd.DataFrame:
    """Count, sum, min and max per (key, window start) of ``records`` (columns key, value, t)."""
    frame = records.assign(window_start=records["t"] - records["t"] % window_ms)
    g = frame.groupby(["key", "window_start"])["value"]
    return pd.DataFrame({"count": g.size(), "sum": g.sum(), "min": g.min(), "max": g.max()})


def committed_windows(kafka: KafkaConfig, topic: str, job: str) -> pd.DataFrame:
    """Every window record of ``job`` a reader of ``kafka``'s isolation level sees: one row per record."""
    codec = AvroCodec("io.ballast.OutputResult")
    with TopicFollower(kafka, topic) as f:
        records = [codec.decode(m.value()) for m in f.read_to_end(60)]
    rows = [(r["key"], r["window_start"], *(r[c] for c in FIGURES)) for r in records if r["job"] == job]
    return pd.DataFrame(rows, columns=["key", "window_start", *FIGURES])


def assert_each_window_once(got: pd.DataFrame, expected: pd.DataFrame) -> None:
    """No window twice, none missing, none unexpected, every figure equal to the reference."""
    dupes = got[got.duplicated(["key", "window_start"], keep=False)]
    assert dupes.empty, f"{len(dupes)} window records are duplicates:\n{dupes.head(20)}"
    got = got.set_index(["key", "window_start"]).sort_index()
    expected = expected.sort_index()
    missing = expected.index.difference(got.index)
    extra = got.index.difference(expected.index)
    assert missing.empty and extra.empty, f"missing {list(missing[:10])}, unexpected {list(extra[:10])}"
    pd.testing.assert_frame_equal(got, expected, check_dtype=False)
