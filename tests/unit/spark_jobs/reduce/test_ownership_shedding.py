"""The keep-probability each record survived, as the reduce reads it from the control log: the
settings of the record's own epoch (a router switches epoch and settings together), its topic's
own setting first, then ``*``, else 1.0."""

from __future__ import annotations

import numpy as np
import pytest

from ballast.control.state import make_event
from spark_jobs.reduce.ownership import EpochNotFolded, OwnershipView
from tests.support.engine_rows import N, genesis, shedding


def view_of(*events) -> OwnershipView:
    view = OwnershipView(N)
    view.apply(genesis())
    for e in events:
        view.apply(e)
    return view


def ask(view: OwnershipView, pairs: list[tuple[str | None, int]]) -> list[float]:
    topics = np.array([t for t, _ in pairs], dtype=object)
    epochs = np.array([e for _, e in pairs], dtype=np.int64)
    return view.keep_probabilities(topics, epochs).tolist()


def test_a_log_that_never_shed_keeps_everything_without_looking() -> None:
    view = view_of(make_event(1, "ROUTING_UPDATE", {"assign": {"k": 1}, "unassign": [], "reason": ""}))
    assert not view.sheds
    assert ask(view, [("a", 0), ("a", 1), (None, 1)]) == [1.0, 1.0, 1.0]


def test_each_record_gets_the_settings_of_its_own_epoch() -> None:
    """The event at epoch 2 applies to records routed under epoch 2 (the router applied it with the
    epoch), not to records of epoch 1; later events for other targets leave a topic's own alone."""
    view = view_of(
        shedding(1, "a", 0.5), shedding(2, "a", 0.25), shedding(3, "*", 0.8), shedding(4, "a", 1.0)
    )
    assert view.sheds
    pairs = [("a", 0), ("a", 1), ("a", 2), ("a", 3), ("a", 4), ("b", 2), ("b", 3), ("b", 4)]
    assert ask(view, pairs) == [1.0, 0.5, 0.25, 0.25, 1.0, 1.0, 0.8, 0.8]


def test_a_record_without_a_topic_gets_only_the_wildcard() -> None:
    view = view_of(shedding(1, "a", 0.5), shedding(2, "*", 0.4))
    assert ask(view, [(None, 1), ("", 1), (None, 2), ("", 2)]) == [1.0, 1.0, 0.4, 0.4]


def test_a_snapshot_replaces_the_settings() -> None:
    snapshot = make_event(
        2,
        "TABLE_SNAPSHOT",
        {"num_workers": N, "table": {}, "keep_probability": {"b": 0.3}, "routed_partitions": N},
    )
    view = view_of(shedding(1, "a", 0.5), snapshot)
    assert ask(view, [("a", 1), ("b", 1), ("a", 2), ("b", 2)]) == [0.5, 1.0, 1.0, 0.3]


def test_many_records_at_once_match_one_by_one() -> None:
    rng = np.random.default_rng(3)
    events = [shedding(e, str(rng.choice(["a", "b", "*"])), float(rng.uniform(0.1, 1))) for e in range(1, 30)]
    view = view_of(*events)
    topics = rng.choice(np.array(["a", "b", "c"], dtype=object), size=2000)
    epochs = rng.integers(0, 30, size=2000)
    # the test's own fold of the events: the settings after each epoch
    settings: list[dict[str, float]] = [{}]
    for e in events:
        body = e["payload"][1]
        settings.append({**settings[-1], body["target"]: body["keep_probability"]})
    expected = [
        settings[int(e)].get(t, settings[int(e)].get("*", 1.0)) for t, e in zip(topics, epochs, strict=True)
    ]
    assert view.keep_probabilities(topics, epochs).tolist() == expected


def test_lowest_keep_over_a_span_of_epochs() -> None:
    view = view_of(shedding(1, "a", 0.5), shedding(2, "a", 1.0), shedding(3, "b", 0.2))
    assert view.lowest_keep(("a",), 0, 0) == 1.0
    assert view.lowest_keep(("a",), 0, 3) == 0.5
    assert view.lowest_keep(("a",), 2, 3) == 1.0
    assert view.lowest_keep(("a", "b"), 2, 3) == 0.2


def test_an_epoch_not_folded_is_refused() -> None:
    view = view_of(shedding(1, "a", 0.5))
    with pytest.raises(EpochNotFolded):
        ask(view, [("a", 2)])


# --- the epoch in force at a log time ----------------------------------------------------------------
