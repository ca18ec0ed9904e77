"""The routing history a worker reads from the control log, its frontier, and its labels."""

from __future__ import annotations

import numpy as np
import pytest

from ballast.control.state import make_event
from ballast.routing.murmur2 import kafka_partition
from spark_jobs.reduce.frontier import InputFrontier
from spark_jobs.reduce.ownership import EpochNotFolded, OwnershipView
from spark_jobs.reduce.placement import first_label_per_partition

N = 4


def genesis(table: dict[str, int] | None = None):
    return make_event(
        0,
        "TABLE_SNAPSHOT",
        {"num_workers": N, "table": table or {}, "keep_probability": {}, "routed_partitions": N},
    )


def update(epoch: int, assign: dict[str, int], unassign: tuple[str, ...] = ()):
    return make_event(epoch, "ROUTING_UPDATE", {"assign": assign, "unassign": list(unassign), "reason": ""})


def home(key: str) -> int:
    return kafka_partition(key.encode(), N)


def test_runs_and_moves_follow_the_log() -> None:
    view = OwnershipView(N)
    view.apply(genesis())
    a = "alpha"
    w1, w2 = (home(a) + 1) % N, (home(a) + 2) % N
    view.apply(update(1, {a: w1}))
    view.apply(make_event(2, "SHEDDING", {"target": "*", "keep_probability": 1.0, "reason": ""}))
    view.apply(update(3, {a: w2}))
    view.apply(update(4, {}, (a,)))  # back to its hash home
    assert [view.owner(a, e) for e in range(5)] == [home(a), w1, w1, w2, home(a)]
    assert [view.run_start(a, e) for e in range(5)] == [0, 1, 1, 3, 4]
    assert view.moves_at(1) == {a: (home(a), w1)} and view.moves_at(2) == {}
    assert view.run_end(a, 1, known=2) is None and view.run_end(a, 1, known=4) == 3
    assert view.owner("never-moved", 4) == home("never-moved") and view.run_start("never-moved", 4) == 0
    with pytest.raises(EpochNotFolded):
        view.owner(a, 5)


def test_an_update_to_the_same_owner_moves_nothing_and_a_resend_is_ignored() -> None:
    view = OwnershipView(N)
    view.apply(genesis())
    view.apply(update(1, {"beta": home("beta")}))
    view.apply(update(1, {"beta": home("beta")}))  # the identical re-send
    assert view.moves_at(1) == {} and view.moved_keys == frozenset()


def test_a_snapshot_moves_what_it_changes_and_a_genesis_table_is_not_a_move() -> None:
    g = (home("g") + 1) % N
    view = OwnershipView(N)
    view.apply(genesis({"g": g}))
    assert view.owner("g", 0) == g and view.moves_at(0) == {} and view.run_start("g", 0) == 0
    h = (home("h") + 1) % N
    view.apply(
        make_event(
            1,
            "TABLE_SNAPSHOT",
            {"num_workers": N, "table": {"h": h}, "keep_probability": {}, "routed_partitions": N},
        )
    )
    assert view.moves_at(1) == {"g": (g, home("g")), "h": (home("h"), h)}


def test_a_change_of_the_hashed_worker_count_moves_the_keys_whose_home_changes() -> None:
    """SCALE 4 -> 2 -> 4: an unpinned key follows murmur2 % n, its runs start where its home
    changed; a pinned key keeps its worker; the vectorised answers equal the per-key ones."""
    view = OwnershipView(N)
    view.apply(genesis())
    pinned = next(f"p{i}" for i in range(100) if home(f"p{i}") == 0)
    view.apply(update(1, {pinned: 1}))
    view.apply(make_event(2, "SCALE", {"num_workers": 2, "reason": ""}))
    view.apply(make_event(3, "SCALE", {"num_workers": 4, "reason": ""}))
    assert view.rehash_epochs == [2, 3] and view.rehash_at(2) == (4, 2) and view.rehash_at(1) is None
    keys = [f"k{i}" for i in range(200)]
    for k in keys:
        h4, h2 = kafka_partition(k.encode(), 4), kafka_partition(k.encode(), 2)
        assert [view.owner(k, e) for e in range(4)] == [h4, h4, h2, h4]
        start2 = 2 if h2 != h4 else 0
        assert view.run_start(k, 2) == start2
        assert view.run_start(k, 3) == (3 if h2 != h4 else 0)
        assert view.run_end(k, 0, 3) == (2 if h2 != h4 else None)
    assert [view.owner(pinned, e) for e in range(4)] == [0, 1, 1, 1] and view.run_start(pinned, 3) == 1
    arr = np.array([*keys, pinned], dtype=object)
    for epoch in range(4):
        owners, starts = view.owners(arr, np.full(arr.size, epoch, dtype=np.int64))
        assert owners.tolist() == [view.owner(k, epoch) for k in arr.tolist()]
        assert starts.tolist() == [view.run_start(k, epoch) for k in arr.tolist()]


def test_the_frontier_is_the_minimum_over_every_input_partition() -> None:
    f = InputFrontier(["in:0", "in:1", "other:0"])
    assert f.frontier == -1
    assert f.observe(0, ["in:0", "in:1"]) == -1  # other:0 has announced nothing yet
    assert f.observe(2, ["other:0", "stranger:9"]) == 0
    assert f.observe(3, ["in:0", "in:1"]) == 2
    assert f.observe(1, ["in:0", "in:1", "other:0"]) == 2  # markers are cumulative: no going back
    assert "stranger:9" not in f.seen


def test_labels_take_the_first_candidate_of_every_partition() -> None:
    pairs = [(0, 3), (1, 3), (2, 0), (3, 1), (4, 0), (5, 2)]
    assert first_label_per_partition(pairs, 4) == [2, 3, 5, 0]
    with pytest.raises(ValueError, match=r"partitions \[2\]"):
        first_label_per_partition(pairs[:4], 3)
