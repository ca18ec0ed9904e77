"""Dead letters read back once each, after checking that every repeat is a replayed batch's.

Spark's Kafka sink is at-least-once (docs/reduce.md, *Delivery*): a job killed -9 mid batch runs
that batch again on restart and writes its dead letters a second time. A test that kills the job
cannot ask for "each record dead-lettered once"; dropping repeats blindly would hide a record
dead-lettered twice by two code paths. So a repeat is accepted only when it has a replay's
signature, and the letters are then counted once each:

* a repeat is an identical copy (same routed position, reason and detail; a late letter's detail
  names the batch's watermark, which a replay recomputes to the same value), at most two copies;
* the repeats come from one batch per restart: the late letters among them name at most
  ``restarts`` watermarks (a batch has one). Not every letter of the replayed batch need repeat:
  the killed attempt may have written part of its rows only.
"""

from __future__ import annotations

import re
from collections import Counter

from ballast.kafka.dead_letters import DeadLetter

WATERMARK = re.compile(r"< watermark (-?\d+)")


def once_each(letters: list[DeadLetter], restarts: int) -> list[DeadLetter]:
    """``letters`` with each replayed copy dropped, in first-seen order; fails (AssertionError) on a
    repeat a replay of at most ``restarts`` batches does not explain."""
    copies = Counter((d.topic, d.partition, d.offset, d.reason, d.detail) for d in letters)
    positions = Counter((d.topic, d.partition, d.offset) for d in letters)
    twice = {k for k, n in copies.items() if n > 1}
    assert all(n <= 2 for n in copies.values()), "a letter written more than twice"
    assert len(twice) == sum(n > 1 for n in positions.values()), (
        "one routed position dead-lettered with different reasons or details: not a replay"
    )
    if twice:
        assert restarts > 0, f"{len(twice)} letters repeated, and the job was never restarted"
        _assert_one_batch_per_restart(twice, restarts)
    seen: set[tuple[str, int, int, str, str]] = set()
    unique: list[DeadLetter] = []
    for d in letters:
        k = (d.topic, d.partition, d.offset, d.reason, d.detail)
        if k not in seen:
            seen.add(k)
            unique.append(d)
    return unique


def _assert_one_batch_per_restart(twice: set[tuple[str, int, int, str, str]], restarts: int) -> None:
    watermarks = {int(m.group(1)) for k in twice if (m := WATERMARK.search(k[4]))}
    assert len(watermarks) <= restarts, (
        f"repeated late letters name {len(watermarks)} watermarks, more batches than the "
        f"{restarts} restart(s) replayed"
    )
