"""Processors named on a command line: durations, options, and errors that list what is valid."""

from __future__ import annotations

import pytest

from spark_jobs.processors.aggregate import WindowAggregate
from spark_jobs.processors.last_values import LastValues
from spark_jobs.processors.spec import from_spec, parse_duration
from spark_jobs.processors.windows import WindowSpec

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("text", "ms"), [("500ms", 500), ("10s", 10_000), ("2m", 120_000), ("1h", 3_600_000), (" 7s ", 7_000)]
)
def test_durations(text, ms):
    assert parse_duration(text) == ms


@pytest.mark.parametrize("text", ["10", "1.5s", "-1s", "10 s", "10d", "s", ""])
def test_bad_durations_say_what_a_duration_is(text):
    with pytest.raises(ValueError, match=r"e\.g\. 500ms, 10s, 2m"):
        parse_duration(text)


def test_aggregate_specs():
    tumbling = from_spec("aggregate:tumbling=10s")
    assert isinstance(tumbling, WindowAggregate) and tumbling.windows == WindowSpec(10_000)
    sliding = from_spec("aggregate:size=10s,slide=5s")
    assert sliding.windows == WindowSpec(10_000, 5_000)
    assert from_spec(" aggregate : size = 1m ").windows == WindowSpec(60_000)


def test_last_values_spec():
    lv = from_spec("last_values:n=5,size=10s")
    assert isinstance(lv, LastValues)
    assert (lv.n, lv.windows) == (5, WindowSpec(10_000))
    assert from_spec("last_values:tumbling=500ms,n=1").windows == WindowSpec(500)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("sum:tumbling=10s", "unknown processor 'sum'; valid processors: aggregate .*last_values"),
        ("aggregate:window=10s", "unknown option 'window'; valid options: tumbling, size, slide"),
        ("last_values:size=10s", "missing option n"),
        ("last_values:n=five,size=10s", "n must be a positive whole number"),
        ("last_values:n=0,size=10s", "n must be a positive whole number"),
        ("aggregate", "needs windows"),
        ("aggregate:slide=5s", "needs windows"),
        ("aggregate:tumbling=10s,size=10s", "either tumbling"),
        ("aggregate:size=10s,slide=3s", "multiple of the slide"),
        ("aggregate:size=10s,slide=20s", "multiple of the slide"),
        ("aggregate:size=0s", "size must be longer than 0"),
        ("aggregate:size=10", "size: '10' is not a duration"),
        ("aggregate:size", "needs a value"),
        ("aggregate:size=10s,size=20s", "given twice"),
    ],
)
def test_bad_specs_say_what_is_wrong(text, message):
    with pytest.raises(ValueError, match=message):
        from_spec(text)
