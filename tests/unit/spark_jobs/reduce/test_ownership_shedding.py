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


def timed_view(*events_at: tuple[dict, int | None]) -> OwnershipView:
    view = OwnershipView(N)
    for event, ms in events_at:
        view.apply(event, ms)
    return view


def test_the_epoch_at_a_time_is_that_of_the_last_event_appended_at_or_before_it() -> None:
    view = timed_view((genesis(), 100), (shedding(1, "a", 0.5), 200), (shedding(2, "a", 1.0), 300))
    assert [view.epoch_at_time(ms, 2) for ms in (0, 99, 100, 199, 200, 201, 299, 300, 10_000)] == [
        0, 0, 0, 0, 1, 1, 1, 2, 2,
    ]  # fmt: skip


def test_the_epoch_at_a_time_answers_only_from_the_epochs_the_caller_knows() -> None:
    """A view folded further than the batch's log end answers as if it were not (a replay may run
    on a view folded less far)."""
    view = timed_view((genesis(), 100), (shedding(1, "a", 0.5), 200), (shedding(2, "a", 1.0), 300))
    assert view.epoch_at_time(10_000, 1) == 1 and view.epoch_at_time(10_000, 0) == 0
    with pytest.raises(EpochNotFolded):
        view.epoch_at_time(10_000, 3)


def test_without_times_the_epoch_at_any_time_is_the_first_one() -> None:
    view = view_of(shedding(1, "a", 0.5), shedding(2, "a", 1.0))
    assert view.epoch_at_time(0, 2) == view.epoch_at_time(10**13, 2) == 0


def test_an_untimed_event_leaves_the_answer_at_the_last_timed_one_before_it() -> None:
    """When an event without a time began is unknown, so the answer never moves past it."""
    view = timed_view((genesis(), 100), (shedding(1, "a", 0.5), None), (shedding(2, "a", 1.0), 300))
    assert [view.epoch_at_time(ms, 2) for ms in (150, 250, 300)] == [0, 0, 2]


def test_a_time_behind_an_earlier_one_counts_as_the_earlier_time() -> None:
    """A writer whose clock ran behind: its event counts as appended no earlier than the event
    before it, which can only make the answer an earlier epoch."""
    view = timed_view((genesis(), 100), (shedding(1, "a", 0.5), 500), (shedding(2, "a", 1.0), 400))
    assert [view.epoch_at_time(ms, 2) for ms in (450, 499, 500)] == [0, 0, 2]


def test_the_last_epoch_at_a_time_is_the_one_before_the_first_event_after_it() -> None:
    view = timed_view((genesis(), 100), (shedding(1, "a", 0.5), 200), (shedding(2, "a", 1.0), 300))
    assert [view.last_epoch_at_time(ms, 2) for ms in (0, 100, 199, 200, 299, 300, 10_000)] == [
        0, 0, 0, 1, 1, 2, 2,
    ]  # fmt: skip
    assert view.last_epoch_at_time(10_000, 1) == 1  # only the epochs the caller knows


def test_without_times_the_last_epoch_at_any_time_is_the_callers_last() -> None:
    """The upper end errs late: an event without a time may have come before any time asked."""
    view = view_of(shedding(1, "a", 0.5), shedding(2, "a", 1.0))
    assert view.last_epoch_at_time(0, 2) == 2 and view.last_epoch_at_time(0, 1) == 1
