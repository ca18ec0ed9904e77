"""Shedding in the router, on fake clients: which records it keeps is a function of the record.

The router keeps a record iff its draw (ballast/routing/shedding_sample.py, a pure function of
input topic, partition, offset and the SHEDDING event's seed) is below the keep-probability in
force for the input topic. So an aborted transaction and its replay keep the same records, two
router instances keep the same records, and a higher keep-probability keeps a superset. The same
replay on a real broker, aborted by kill -9 and by an injected abort: tests/integration/services/
router/test_router_shedding_replay.py.
"""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from ballast.control.state import make_event, shedding
from ballast.routing.shedding_sample import keeps
from tests.support.router_fakes import ENVELOPE, ROUTED, make_router, msg, play, routed, routed_offsets

pytestmark = pytest.mark.unit

OFFSETS = range(0, 600)


def shedding_router(p: float, seed: int, target: str = "in"):
    router = make_router(exactly_once=True, committed={("in", 0): 0, ("in", 1): 0})
    router.control.reader.events.append(make_event(1, *shedding(target, p, seed=seed)))  # type: ignore[attr-defined]
    return router


def batches() -> list[tuple[str, list]]:
    return [("batch", [msg(p, o) for o in OFFSETS[i : i + 100] for p in (0, 1)]) for i in range(0, 600, 100)]


def kept(router) -> set[tuple[int, int]]:
    return {
        (b["source_partition"], b["source_offset"])
        for branch, b in routed(router)
        if branch == "io.ballast.DataRecord"
    }


def test_the_router_keeps_exactly_the_records_whose_draw_is_below_p():
    router = shedding_router(0.3, seed=7)
    play(router, ("assign", [("in", 0), ("in", 1)]), *batches())
    expected = {(p, o) for p in (0, 1) for o in OFFSETS if keeps(0.3, 7, "in", p, o)}
    assert kept(router) == expected
    assert 0.2 * 1200 < len(expected) < 0.4 * 1200
    assert router.totals.shed == 1200 - len(expected) and router.totals.offered == 1200


def test_star_applies_with_its_seed_and_other_seeds_keep_other_records():
    star = shedding_router(0.5, seed=3, target="*")
    play(star, ("assign", [("in", 0), ("in", 1)]), *batches())
    assert kept(star) == {(p, o) for p in (0, 1) for o in OFFSETS if keeps(0.5, 3, "in", p, o)}
    other = shedding_router(0.5, seed=4)
    play(other, ("assign", [("in", 0), ("in", 1)]), *batches())
    assert kept(other) != kept(star)


def test_two_instances_keep_the_same_records_and_a_higher_p_keeps_a_superset():
    runs = {}
    for name, p in (("a", 0.4), ("b", 0.4), ("c", 0.7)):
        router = shedding_router(p, seed=11)
        play(router, ("assign", [("in", 0), ("in", 1)]), *batches())
        runs[name] = kept(router)
    assert runs["a"] == runs["b"]
    assert runs["a"] < runs["c"]


def test_an_aborted_transaction_and_its_replay_keep_the_same_records():
    """The transaction holding offsets 0..299 aborts at its commit; the consumer is rewound to
    the committed offsets and the same records come again: the replay keeps what the aborted
    attempt kept (the per-process random generator used before kept others)."""
    router = shedding_router(0.5, seed=5)
    aborted: list = []
    abort = router.producer.abort_transaction

    def recording_abort(timeout: float = -1) -> None:
        aborted.extend(router.producer.pending)  # type: ignore[attr-defined]
        abort(timeout)

    router.producer.abort_transaction = recording_abort  # type: ignore[method-assign]
    first = [msg(0, o) for o in range(300)]
    router.consumer.script = [("assign", [("in", 0)]), ("batch", first), ("batch", first)]  # type: ignore[attr-defined]
    router.start()
    router.step()  # epoch 1 (its marker committed), then offsets 0..299 in an open transaction
    router.producer.fail_commit.append(  # type: ignore[attr-defined]
        KafkaException(KafkaError(KafkaError._FENCED, "injected", txn_requires_abort=True))
    )
    router.checkpoint.commit()  # aborts: rewind to offset 0
    router.step()  # the replay of 0..299
    router.stop()
    router.run()
    assert router.totals.aborts == 1 and router.consumer.seeks == [("in", 0, 0)]  # type: ignore[attr-defined]
    first_kept = [
        body["source_offset"]
        for branch, body in (ENVELOPE.decode(s.value)["body"] for s in aborted if s.topic == ROUTED)
        if branch == "io.ballast.DataRecord"
    ]
    assert 100 < len(first_kept) < 200
    assert routed_offsets(router) == first_kept
    assert first_kept == [o for o in range(300) if keeps(0.5, 5, "in", 0, o)]
