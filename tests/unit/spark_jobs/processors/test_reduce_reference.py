"""The ground truth itself, checked by hand-worked examples, and kept apart from what it judges."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.support import reduce_reference
from tests.support.reduce_reference import expected_aggregates, expected_last_values, window_starts

pytestmark = pytest.mark.unit


def test_window_starts_by_hand():
    assert window_starts(0, 10) == [0]
    assert window_starts(9, 10) == [0]
    assert window_starts(10, 10) == [10]
    assert window_starts(-1, 10) == [-10]
    assert window_starts(-10, 10) == [-10]
    assert window_starts(7, 10, 5) == [0, 5]
    assert window_starts(-1, 15, 5) == [-15, -10, -5]
    with pytest.raises(ValueError):
        window_starts(0, 10, 3)


EVENTS = [
    {"key": "a", "event_time": 1, "value": 4.0},
    {"key": "b", "event_time": 12, "value": -1.0},
    {"key": "a", "event_time": 8, "value": 1.0},
    {"key": "a", "event_time": 12, "value": 2.5},
    {"key": "a", "event_time": -3, "value": 7.0},
]


def test_tumbling_aggregates_by_hand():
    assert expected_aggregates(EVENTS, 10) == {
        ("a", 0): {"count": 2, "sum": 5.0, "min": 1.0, "max": 4.0, "mean": 2.5, "window_end": 10},
        ("a", 10): {"count": 1, "sum": 2.5, "min": 2.5, "max": 2.5, "mean": 2.5, "window_end": 20},
        ("a", -10): {"count": 1, "sum": 7.0, "min": 7.0, "max": 7.0, "mean": 7.0, "window_end": 0},
        ("b", 10): {"count": 1, "sum": -1.0, "min": -1.0, "max": -1.0, "mean": -1.0, "window_end": 20},
    }


def test_sliding_last_values_by_hand():
    got = expected_last_values(EVENTS, 2, 10, 5)
    # key a, window [5, 15): times 8 and 12 -> values 1.0 then 2.5
    assert got[("a", 5)]["values"] == (1.0, 2.5)
    # key a, window [0, 10): times 1, 8 in input order -> 4.0 then 1.0
    assert got[("a", 0)]["values"] == (4.0, 1.0)
    assert got[("a", 0)]["count"] == 2
    # key a, window [-5, 5): times 1 and -3, in input order (not time order): 4.0 then 7.0
    assert got[("a", -5)]["values"] == (4.0, 7.0)
    assert got[("a", -5)]["max"] == 7.0
    assert sorted(got) == [("a", -10), ("a", -5), ("a", 0), ("a", 5), ("a", 10), ("b", 5), ("b", 10)]


def test_last_values_keeps_only_the_last_n():
    events = [{"key": "k", "event_time": t, "value": float(t)} for t in (3, 1, 2, 0)]
    assert expected_last_values(events, 3, 10)[("k", 0)]["values"] == (1.0, 2.0, 0.0)


def test_shares_no_code_with_the_processors():
    tree = ast.parse(Path(reduce_reference.__file__).read_text())
    imported = {
        (node.module or "") if isinstance(node, ast.ImportFrom) else alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    assert not {m for m in imported if m.split(".")[0] in ("spark_jobs", "numpy")}, imported
