"""Reading a query's progress: offsets a source leaves out, instants, and which batches a poll
has not seen (the latest progress alone when it is enough)."""

from __future__ import annotations

import pytest

from spark_jobs.query_progress import end_offsets, iso_ms, unseen_batches

pytestmark = pytest.mark.unit


def test_spark_instants_read_as_epoch_milliseconds():
    assert iso_ms("1970-01-01T00:00:01.234Z") == 1234
    assert iso_ms("2026-11-25T00:00:00.000Z") == 1795564800000
    assert iso_ms(None) == 0 and iso_ms("") == 0


def test_offsets_a_source_does_not_report_are_unknown_not_an_error():
    """After a restart Spark reported the first batch's latestOffset as an empty string; parsing
    it ended the reduce. Unparseable or missing offsets read as -1 (unknown)."""
    for raw in ("", "  ", "not json", None, "null", "[1, 2]"):
        progress = {"sources": [{"endOffset": '{"routed": {"0": 7, "1": 9}}', "latestOffset": raw}]}
        assert end_offsets(progress, "routed", 2) == [7, 9]
        assert end_offsets(progress, "routed", 2, "latestOffset") == [-1, -1]


# --- which progress to publish: the latest alone when it is enough -----------------------------------


def ran(batch: int) -> dict:
    return {"batchId": batch, "durationMs": {"addBatch": 10, "triggerExecution": 20}}


def idle(batch: int) -> dict:
    return {"batchId": batch, "durationMs": {"triggerExecution": 1}}


class Recent:
    """The query's recent progress, counting how often it was asked for (each call costs the JVM
    a JSON per update kept)."""

    def __init__(self, *updates: dict) -> None:
        self.updates, self.calls = list(updates), 0

    def __call__(self) -> list[dict]:
        self.calls += 1
        return self.updates


def ids(found: list[dict]) -> list[int]:
    return [int(p["batchId"]) for p in found]


def test_the_next_batch_comes_from_the_latest_progress_alone():
    recent = Recent(ran(4), ran(5))
    assert ids(unseen_batches(4, ran(5), recent)) == [5]
    assert ids(unseen_batches(5, ran(5), recent)) == []  # seen already
    assert ids(unseen_batches(5, idle(5), recent)) == []  # an idle trigger after it
    assert ids(unseen_batches(5, None, recent)) == []  # nothing reported yet
    assert recent.calls == 0


def test_a_batch_that_ran_between_two_polls_is_found_in_the_recent_progress():
    recent = Recent(ran(5), ran(6), idle(7), ran(7))
    assert ids(unseen_batches(5, ran(7), recent)) == [6, 7]  # 6 ran unseen
    assert ids(unseen_batches(5, idle(7), recent)) == [6, 7]  # an idle trigger after unseen batches
    assert ids(unseen_batches(-1, ran(7), recent)) == [5, 6, 7]  # after a start: every one Spark kept
    assert recent.calls == 3
