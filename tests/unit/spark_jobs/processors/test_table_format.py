"""State tables as bytes: what an older version stored or shipped still loads, and columns that
hold only their fill value cost nothing.

The old format (``BT1``) is written here by hand from its layout, not by the code under test: a
state saved in a checkpoint, or a chunk in flight, before the sampling columns existed."""

from __future__ import annotations

import numpy as np
import pytest

from spark_jobs.processors.aggregate import AggregateBatch
from spark_jobs.processors.sampling import SAMPLING_COLUMNS
from spark_jobs.processors.table import Table
from spark_jobs.processors.windows import WindowSpec
from spark_jobs.reduce.store import HeldRecords
from tests.support.old_formats import aggregate_rows_v1, table_v1

AGG = AggregateBatch(WindowSpec(100))


def test_a_state_written_before_the_sampling_columns_loads_with_them_at_zero() -> None:
    old = aggregate_rows_v1(["a", "b"], [100, 200], [4, 1], [10.5, 2.0], [1.0, 2.0], [5.0, 2.0])
    t = Table.from_bytes(AGG.schema(), old)
    assert (t.key.tolist(), t.run.tolist(), t.window.tolist()) == (["a", "b"], [0, 0], [100, 200])
    c = t.columns
    assert c["count"].tolist() == [4, 1] and c["sum"].tolist() == [10.5, 2.0]
    assert (c["min"].tolist(), c["max"].tolist()) == ([1.0, 2.0], [5.0, 2.0])
    assert (c["excluded"].tolist(), c["dirty"].tolist(), c["revision"].tolist()) == ([0, 0], [1, 1], [-1, -1])
    for name in SAMPLING_COLUMNS:
        assert c[name].tolist() == [0, 0], name


def test_records_held_before_keep_probabilities_were_stored_load_as_kept_for_sure() -> None:
    old = table_v1(["k", "k"], [2, 2], [7, 8], [("<i8", [10, 20]), ("<f8", [1.5, 2.5])])
    held = HeldRecords.from_bytes(old)
    assert held.tuples() == [("k", 2, 7, 10, 1.5, 1.0), ("k", 2, 8, 20, 2.5, 1.0)]


def _rows(sampled: bool) -> Table:
    n = 3
    cols = {"count": np.array([1, 2, 3]), "sum": np.array([1.0, 2.0, 3.0])}
    if sampled:
        cols |= {"sampled": np.array([0, 1, 0]), "ht_count": np.array([0.0, 1.0, 0.0])}
    return Table.rows(
        AGG.schema(), np.array(["x", "y", "z"], dtype=object), np.zeros(n), np.arange(n), **cols
    )


def test_columns_at_their_fill_are_not_written_and_read_back_as_fill() -> None:
    plain, shed = _rows(False), _rows(True)
    plain_bytes, shed_bytes = plain.to_bytes(), shed.to_bytes()
    assert b"ht_count" not in plain_bytes and b"ht_sum" not in plain_bytes
    assert b"ht_count" in shed_bytes and b"ht_sum" not in shed_bytes  # only what holds something
    # two columns of 3 rows more, and their names
    assert len(shed_bytes) - len(plain_bytes) == 3 * 8 + 3 * 8 + len(b"\x00sampled\x00ht_count")
    for table, blob in ((plain, plain_bytes), (shed, shed_bytes)):
        back = Table.from_bytes(AGG.schema(), blob)
        for name in AGG.schema():
            assert np.array_equal(back.columns[name], table.columns[name]), name


def test_a_column_the_schema_does_not_know_is_refused() -> None:
    blob = _rows(True).to_bytes()
    narrower = {k: v for k, v in AGG.schema().items() if k != "ht_count"}
    with pytest.raises(ValueError, match="not this schema"):
        Table.from_bytes(narrower, blob)
