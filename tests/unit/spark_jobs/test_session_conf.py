"""The Spark settings every Ballast query runs with, where a value is a measured decision.

Why a test for two constants: together they took the reduce from 118 to 66 µs of CPU a record on
100,000-row batches (docs/reduce.md, "Throughput"), and both look like harmless defaults to anyone
tidying the settings up. Spark skips
the Arrow byte-size check only at exactly Int.MaxValue, so "a big number" is not the same value.
"""

from __future__ import annotations

import pytest

from spark_jobs.session import SPARK_CONF

pytestmark = pytest.mark.unit

INT_MAX = 2**31 - 1


def test_the_arrow_byte_limit_is_the_value_that_turns_its_per_row_check_off():
    assert int(SPARK_CONF["spark.sql.execution.arrow.maxBytesPerBatch"]) == INT_MAX
    # the batches stay bounded by rows instead
    assert 0 < int(SPARK_CONF["spark.sql.execution.arrow.maxRecordsPerBatch"]) <= 100_000


def test_the_types_framework_flag_is_set_so_from_avro_does_not_read_the_environment_per_field():
    assert SPARK_CONF["spark.sql.types.framework.enabled"] == "false"
