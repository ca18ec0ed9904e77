"""The partition stage's own output path: a window the task writes reads back as the native query's."""

from __future__ import annotations

from ballast.avro.codec import AvroCodec
from bench.reduce.partition_task import window_record


def test_a_window_the_task_encodes_reads_back_with_every_figure_the_check_compares() -> None:
    codec = AvroCodec("io.ballast.OutputResult")
    record = window_record("job-1", "user-7", 10_000, 20_000, 3, 6.0, 1.0, 3.0, 2.0)
    back = codec.decode(codec.encode(record))
    assert (back["key"], back["job"], back["window_start"], back["window_end"]) == ("user-7", "job-1", 10_000,
                                                                                     20_000)  # fmt: skip
    assert (back["count"], back["sum"], back["min"], back["max"], back["mean"]) == (3, 6.0, 1.0, 3.0, 2.0)
    assert (back["worker"], back["revision"], back["excluded_records"], back["exact"]) == (-1, 0, 0, True)
    assert back["estimated_count"] == back["count_low"] == back["count_high"] == 3.0
