"""Acceptance 5 of the shedder issue: a replayed router transaction under shedding keeps exactly the
records the aborted attempt kept (real broker).

A SHEDDING event keeps half of the input (keep 0.5, seed in the event). The router routes the input
in one transaction that aborts; the replay commits. What the aborted attempt kept is still in the
routed topic, readable by a ``read_uncommitted`` consumer; what the replay kept is what a
``read_committed`` one reads. Per input partition, over the offsets the aborted attempt reached,
the two must be the same set of input offsets. Two ways to abort:

* kill -9 of the router process with its transaction open; a new process with the same id fences
  it (``init_transactions`` aborts the zombie's transaction) and replays from the committed
  offsets;
* an abortable error at the commit (injected in front of the real producer), in a router in this
  process: the real transaction is aborted and the same router rewinds and routes the records again.

Against the router before the keep decision was a function of the record (a per-process
``random.Random``), both tests fail: about half of the replayed records differ.
"""

from __future__ import annotations

import signal
import threading
import time
import uuid
from collections import defaultdict
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition
from conftest import WORKERS

from ballast.kafka.clients import make_consumer
from ballast.kafka.reading import read_until_idle
from ballast.waiting import wait_until
from ballast.workload import input_events
from services.router.router import Router

N = 40_000
KEEP = 0.5
SEED = 20_240


def shed_half(kit) -> None:
    kit.send_control(
        "SHEDDING", {"target": kit.input, "keep_probability": KEEP, "reason": "acceptance 5", "seed": SEED}
    )


def routed_data(kit, isolation: str) -> dict[tuple[int, int], tuple[int, int]]:
    """(routed partition, routed offset) -> (input partition, input offset) of every data record."""
    group = f"replay-check-{uuid.uuid4().hex[:8]}"
    consumer = make_consumer(kit.kafka, group, **{"isolation.level": isolation})
    try:
        consumer.assign([TopicPartition(kit.routed, p, 0) for p in range(WORKERS)])
        messages = read_until_idle(consumer, min_records=1, idle=3.0, timeout=120)
    finally:
        consumer.close()
    out = {}
    for m in messages:
        branch, body = kit.envelope.decode(m.value())["body"]
        if branch == "io.ballast.DataRecord":
            out[(m.partition(), m.offset())] = (body["source_partition"], body["source_offset"])
    return out


def end_offsets(kit, topic: str, partitions: int) -> dict[int, int]:
    """High watermarks, open transactions included (a ``read_committed`` client would get the last
    stable offset, which stays put while a transaction is open)."""
    group = f"replay-ends-{uuid.uuid4().hex[:8]}"
    consumer = make_consumer(kit.kafka, group, **{"isolation.level": "read_uncommitted"})
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1]
            for p in range(partitions)
        }
    finally:
        consumer.close()


def assert_the_replay_kept_what_the_aborted_attempt_kept(kit) -> None:
    committed = routed_data(kit, "read_committed")
    everything = routed_data(kit, "read_uncommitted")
    aborted = [src for pos, src in everything.items() if pos not in committed]
    kept = list(committed.values())
    assert len(set(kept)) == len(kept), "a record routed twice"
    first: dict[int, set[int]] = defaultdict(set)
    for p, o in aborted:
        first[p].add(o)
    replay: dict[int, set[int]] = defaultdict(set)
    for p, o in kept:
        replay[p].add(o)
    reached = sum(max(offs) + 1 for offs in first.values())
    assert len(aborted) > 1000 and reached > N // 4, f"{len(aborted)} records aborted: nothing tested"
    # about half of the input offsets the aborted attempt reached: it shed, it did not stop early
    assert 0.45 * reached < len(aborted) < 0.55 * reached, (len(aborted), reached)
    for p, offsets in sorted(first.items()):
        reached_p = max(offsets)  # the aborted attempt read at least this far (shed records leave no trace)
        again = {o for o in replay[p] if o <= reached_p}
        assert again == offsets, (
            f"input partition {p}, offsets 0..{reached_p}: the aborted attempt kept {len(offsets)}, "
            f"the replay {len(again)}; {len(offsets ^ again)} differ, e.g. {sorted(offsets ^ again)[:5]}"
        )
    # and what was kept is what the draw names: key-independent, a function of the record and seed
    from ballast.routing.shedding_sample import keeps

    ends = end_offsets(kit, kit.input, kit.layout.input_partitions)
    assert sum(ends.values()) == N
    named = {(p, o) for p, end in ends.items() for o in range(end) if keeps(KEEP, SEED, kit.input, p, o)}
    assert set(kept) == named


def test_a_replay_after_kill9_keeps_the_records_the_aborted_attempt_kept(kit):
    shed_half(kit)
    kit.produce_events(input_events(N, num_keys=5_000, z=1.0, seed=17))
    # one long transaction: the first commit is due after 45 s (below the producer's 60 s
    # transaction.timeout.ms, so the coordinator does not abort it first); the input is routed
    # in a few seconds, and the kill finds all of it in the open transaction
    first = kit.start_process("r1", "--commit-interval-ms", "45000")
    last = [-1, time.monotonic()]

    def routed_and_quiet() -> bool:
        kit.pipe.check_running(first)
        written = sum(end_offsets(kit, kit.routed, WORKERS).values())  # uncommitted records too
        if written != last[0]:
            last[:] = [written, time.monotonic()]
        return written > N // 4 and time.monotonic() - last[1] > 2.0

    wait_until(routed_and_quiet, 40, "the first router routing the input", interval=0.2)
    assert kit.committed_total() == 0, "the first router committed: its transaction was not the one killed"
    kit.pipe.kill(first, signal.SIGKILL)

    second = kit.start_process("r1", name="router-r1-replay")  # the same id: fences and aborts the first
    kit.wait_committed(N)
    assert kit.pipe.stop(second) == 0, kit.pipe.log_tail(second)
    assert_the_replay_kept_what_the_aborted_attempt_kept(kit)


class AbortFirstCommit:
    """The router's transactional producer, except that its first ``commit_transaction`` fails
    with an abortable error (as a produce or coordinator failure inside the transaction would);
    the checkpoint then aborts the real transaction and rewinds the consumer."""

    def __init__(self, producer: Any) -> None:
        self._producer = producer
        self.failed = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._producer, name)

    def commit_transaction(self, timeout: float = -1) -> None:
        if not self.failed:
            self.failed += 1
            raise KafkaException(
                KafkaError(KafkaError._TIMED_OUT, "injected: abort this transaction", txn_requires_abort=True)
            )
        self._producer.commit_transaction(timeout)


def test_an_aborted_transaction_replayed_by_the_same_router_keeps_the_same_records(kit):
    shed_half(kit)
    kit.produce_events(input_events(N, num_keys=5_000, z=1.0, seed=18))
    # the first commit comes after 3 s: by then the whole input is routed in that transaction
    router = Router.connect(kit.settings("r2", commit_interval_ms=3_000), kit.layout, kit.kafka)
    injected = AbortFirstCommit(router.checkpoint.producer)
    router.checkpoint.producer = injected
    errors: list[BaseException] = []

    def run() -> None:
        try:
            router.run()
        except BaseException as exc:
            errors.append(exc)
            raise

    thread = threading.Thread(target=run, name="router-r2", daemon=True)
    thread.start()
    try:
        kit.wait_committed(N)
    finally:
        router.stop()
        thread.join(60)
    assert not thread.is_alive() and not errors, errors
    assert injected.failed == 1 and router.totals.aborts == 1
    assert_the_replay_kept_what_the_aborted_attempt_kept(kit)
