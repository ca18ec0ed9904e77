"""A worker's view that starts at a snapshot, or forgot its older detail, answers like the truth.

Issue 27, defect 5: every worker folded the control log from its genesis. The view now starts at
the latest snapshot that carries the history and keeps the detail of recent epochs only; these
tests fold random logs (moves, hand-backs, SCALEs, shedding changes, snapshots as the controller
writes them) and ask every question the engine asks, at every epoch, of:

* the view from the origin (what the old fold did),
* a view started at each snapshot, reading older events again when a question needs them,
* a view that forgets its detail as it goes,

and compare each answer with :class:`tests.support.control_logs.Truth`, a brute-force fold of its own.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from ballast.avro.codec import AvroCodec
from ballast.control.history import History
from ballast.control.state import CONTROL_SCHEMA, StateBuilder, initial_state, snapshot_history
from spark_jobs.reduce.ownership import EpochForgotten, OwnershipView
from tests.support.control_logs import TOPIC, LogShape, Truth, cold_key, control_log, key_name

W = 6
TOPICS = (TOPIC, "other.input", "")


def small_log(seed: int) -> list[dict]:
    shape = LogShape(workers=W, keys=30, epochs=260, step_keys=3, shed_every=12, scale_every=60,
                     snapshot_every=25, cold_keys=2, seed=seed)  # fmt: skip
    codec = AvroCodec(CONTROL_SCHEMA)
    return [codec.decode(codec.encode(e)) for e in control_log(shape)]  # as a reader gets them


class Loads:
    """The loader a worker's log gives its view: a view from the latest snapshot with a history
    at or before the epoch (else the origin), folded to the asking view's epoch."""

    def __init__(self, events: list[dict]) -> None:
        self.events = events
        self.calls: list[int] = []
        self.asking: OwnershipView | None = None

    def starts(self) -> list[int]:
        return [i for i, e in enumerate(self.events) if snapshot_history(e) is not None]

    def view_from(self, index: int, upto: int) -> OwnershipView:
        view = OwnershipView(W, loader=self)
        for e in self.events[index : upto + 1]:
            view.apply(e)
        return view

    def __call__(self, epoch: int) -> OwnershipView:
        self.calls.append(epoch)
        assert self.asking is not None
        candidates = [i for i in self.starts() if int(self.events[i]["epoch"]) <= epoch]
        return self.view_from(candidates[-1] if candidates else 0, self.asking.epoch)


def check_all(view: OwnershipView, truth: Truth, first: int, rng: random.Random) -> None:
    """Every question the engine asks, at every epoch from ``first``, against the truth."""
    last = truth.last
    keys = [key_name(i) for i in range(30)] + [cold_key(0), cold_key(1), "never-pinned-a", "never-pinned-b"]
    assert set(view.moved_keys) == truth.ever_pinned()
    assert view.sheds == any(truth.keep(t, e) < 1 for e in range(last + 1) for t in TOPICS)
    assert list(view.rehash_epochs) == [e for e in range(1, last + 1) if truth.rehash_at(e)]
    for e in range(first, last + 1):
        assert view.modulus(e) == truth.states[e].num_workers
        assert view.rehash_at(e) == truth.rehash_at(e)
        assert dict(view.moves_at(e)) == truth.moves_at(e, keys), e
        assert view.keep_at(e) == dict(truth.states[e].keep_probability)
        for key in keys:
            assert view.owner(key, e) == truth.owner(key, e), (key, e)
            start = view.run_start(key, e)
            assert start == truth.run_start(key, e), (key, e)
            known = rng.randrange(e, last + 1)
            assert view.run_end(key, start, known) == truth.run_end(key, start, known), (key, start, known)
        arr = np.array(keys, dtype=object)
        owner, start = view.owners(arr, np.full(arr.size, e, dtype=np.int64))
        assert owner.tolist() == [truth.owner(k, e) for k in keys]
        assert start.tolist() == [truth.run_start(k, e) for k in keys]
        topics = np.array(TOPICS, dtype=object)
        got = view.keep_probabilities(topics, np.full(topics.size, e, dtype=np.int64)).tolist()
        assert got == [truth.keep(t, e) for t in TOPICS]
        lo = rng.randrange(0, e + 1)  # a run that began long ago: from any epoch on
        for topics in ((TOPIC,), (TOPIC, "other.input"), ()):
            assert view.lowest_keep(topics, lo, e) == truth.lowest_keep(topics, lo, e), (topics, lo, e)


@pytest.mark.parametrize("seed", range(3))
def test_a_view_from_the_origin_answers_like_the_truth(seed):
    events = small_log(seed)
    truth = Truth(events, W)
    view = OwnershipView(W)
    for e in events:
        view.apply(e)
    check_all(view, truth, 0, random.Random(seed))


@pytest.mark.parametrize("seed", range(4))
def test_a_view_from_a_snapshot_answers_like_the_truth_reading_older_events_only_when_asked(seed):
    events = small_log(seed)
    truth = Truth(events, W)
    loads = Loads(events)
    starts = loads.starts()
    assert len(starts) >= 8  # the log has snapshots with a history to start at
    for index in rng_pick(starts, seed):
        start_epoch = int(events[index]["epoch"])
        view = loads.asking = loads.view_from(index, truth.last)
        assert view.floor == start_epoch
        loads.calls.clear()
        # questions about the epochs after the snapshot read nothing older ...
        check_all(view, truth, start_epoch + 1, random.Random(seed))
        # ... except for runs that ended before it and shedding before it, which the history
        # answers (no load) or, for a run's end, loads: never more than the truth needs
        assert all(c <= start_epoch for c in loads.calls)
        # and every earlier epoch, read again from an earlier snapshot (or the origin)
        check_all(view, truth, 0, random.Random(seed + 1))
        assert loads.calls and view.floor <= max(min(loads.calls), 0)  # moves_at(0) asks for -1


def rng_pick(starts: list[int], seed: int) -> list[int]:
    rng = random.Random(seed)
    return [*sorted(rng.sample(starts[:-1], 2)), starts[-1]]


@pytest.mark.parametrize("seed", range(4))
def test_a_view_that_forgets_as_it_goes_answers_like_the_truth(seed):
    events = small_log(seed)
    truth = Truth(events, W)
    loads = Loads(events)
    view = loads.asking = OwnershipView(W, loader=loads)
    rng = random.Random(seed)
    floors = []
    for e in events:
        view.apply(e)
        if rng.random() < 0.1 and view.epoch > 0:
            view.compact(rng.randrange(view.floor, view.epoch + 1))
            floors.append(view.floor)
            # a question right after: recent epochs answer from the detail kept
            recent = rng.randrange(view.floor, view.epoch + 1)
            k = key_name(rng.randrange(30))
            assert view.run_start(k, recent) == truth.run_start(k, recent)
    assert len(set(floors)) > 3 and not loads.calls
    check_all(view, truth, view.floor + 1, rng)  # after the floor: still nothing read again
    assert not loads.calls
    check_all(view, truth, 0, rng)
    assert loads.calls


def test_forget_keeps_what_questions_needed_and_drops_the_rest():
    events = small_log(3)
    truth = Truth(events, W)
    loads = Loads(events)
    view = loads.asking = OwnershipView(W, loader=loads)
    for e in events[:100]:
        view.apply(e)
    view.owner(key_name(1), 40)  # a lagging worker asks about epoch 40
    for e in events[100:]:
        view.apply(e)
    assert view.forget(retain=20)
    assert view.floor == 40  # not past what was asked
    assert not view.forget(retain=20)  # nothing asked since: wait for questions over 20 epochs
    assert view.run_start(key_name(1), 40) == truth.run_start(key_name(1), 40) and not loads.calls


def test_without_a_loader_a_forgotten_epoch_is_refused_not_guessed():
    events = small_log(4)
    view = OwnershipView(W)
    for e in events:
        view.apply(e)
    view.compact(view.epoch - 10)
    with pytest.raises(EpochForgotten):
        view.owner(key_name(0), view.epoch - 50)


@pytest.mark.parametrize("seed", range(4))
def test_every_snapshot_carries_the_history_a_fold_from_the_origin_has(seed):
    """What the writer wrote into each snapshot equals the history a tracking fold of the log up
    to there holds; decoded, it is the same history."""
    events = small_log(seed)
    builder = StateBuilder(initial_state(W), history=True)
    seen = 0
    for e in events:
        history = snapshot_history(e)
        if history is not None:
            assert builder.history == history
            seen += 1
        builder.apply(e)
    assert seen >= 8
    assert History.from_avro(builder.history.to_avro()) == builder.history
