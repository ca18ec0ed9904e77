"""The control record's Kafka timestamp the reader hands out with each event (when it was
appended, for whoever audits the log): a record without one must read as unknown, never as time 0
or -1."""

from __future__ import annotations

from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME, TIMESTAMP_NOT_AVAILABLE

from ballast.control.log import record_time_ms


class _Message:
    def __init__(self, kind: int, ms: int) -> None:
        self._stamp = (kind, ms)

    def timestamp(self) -> tuple[int, int]:
        return self._stamp


def test_a_create_or_append_time_is_the_records_time() -> None:
    assert record_time_ms(_Message(TIMESTAMP_CREATE_TIME, 1_700_000_000_123)) == 1_700_000_000_123
    assert record_time_ms(_Message(TIMESTAMP_LOG_APPEND_TIME, 42)) == 42


def test_a_record_without_a_time_has_none() -> None:
    assert record_time_ms(_Message(TIMESTAMP_NOT_AVAILABLE, 0)) is None
    assert record_time_ms(_Message(TIMESTAMP_CREATE_TIME, -1)) is None
