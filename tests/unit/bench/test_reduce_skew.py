"""The skew part's pure pieces: a drifting hot set, the pairing with the best peer, the busiest share."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from bench.reduce.backlog import drifting_events
from bench.reduce.runs import Run, workers_of
from bench.reduce.skew import busiest_shares, skew_summary
from bench.reduce.throughput import batch_steps

pytestmark = pytest.mark.unit


def _hottest(ids: np.ndarray) -> tuple[int, float]:
    key, n = Counter(ids.tolist()).most_common(1)[0]
    return key, n / ids.size


def test_the_hot_set_moves_at_every_phase_and_keeps_its_skew() -> None:
    e = drifting_events(40_000, 1_000, 1.0, seed=7, per_ms=10, start_ms=0, phases=4)
    quarters = np.array_split(e.ids, 4)
    hot = [_hottest(q) for q in quarters]
    assert len({k for k, _share in hot}) == 4  # a new hottest key in every phase
    for _key, share in hot:
        assert 0.08 < share < 0.2  # Zipf(1.0) over 1,000 keys: the hottest holds ~13 %
    assert np.all(np.diff(e.times) >= 0)  # event time still only moves forward
    again = drifting_events(40_000, 1_000, 1.0, seed=7, per_ms=10, start_ms=0, phases=4)
    assert np.array_equal(e.ids, again.ids)  # seeded: every contender reads the same backlog


def _run(contender: str, seed: int, rate: float) -> dict:
    return {
        "contender": contender, "seed": seed, "records_per_s": rate, "batch_p50_ms": 1000,
        "batch_p99_ms": 2000, "cpu_us_per_record": 300.0, "check": {"missing": 0, "unexpected": 0,
        "different": 0, "repeated_rows": 0},
    }  # fmt: skip


def test_ballast_is_paired_with_the_best_peer_of_each_seed() -> None:
    runs = [
        _run("ballast", 1, 1300.0), _run("peer-1s", 1, 800.0), _run("peer-4s", 1, 1000.0),
        _run("ballast", 2, 900.0), _run("peer-1s", 2, 1200.0), _run("peer-4s", 2, 1000.0),
    ]  # fmt: skip
    s = skew_summary(1.0, runs, cores=2, keys=1_000)
    assert s["ballast_over_best_peer"] == [
        {"seed": 1, "subject": "ballast", "best_peer": "peer-4s", "ratio": 1.3},
        {"seed": 2, "subject": "ballast", "best_peer": "peer-1s", "ratio": 0.75},
    ]
    assert s["ballast_over_best_peer_median"] == pytest.approx(1.025)
    assert s["best_ballast_over_best_peer_median"] == pytest.approx(1.025)
    assert s["contenders"]["peer-1s"]["records_per_s_median"] == 1000.0
    assert s["slot_share"] == 0.5
    assert s["busiest_share_bound"] == s["hottest_key_share"] > 0.125  # the hot key, not 1/8 workers


def test_ballasts_best_configuration_is_paired_as_the_peers_best_is() -> None:
    runs = [
        _run("ballast", 1, 1300.0), _run("ballast-2w", 1, 1500.0), _run("peer-1s", 1, 1000.0),
        _run("ballast", 2, 900.0), _run("ballast-2w", 2, 800.0), _run("peer-1s", 2, 1000.0),
    ]  # fmt: skip
    s = skew_summary(1.0, runs, cores=2, keys=1_000)
    assert s["ballast_over_best_peer_median"] == pytest.approx(1.1)  # 8 workers: 1.3, 0.9
    assert s["best_ballast_over_best_peer_median"] == pytest.approx(1.2)  # the better of each seed: 1.5, 0.9
    two = s["contenders"]["ballast-2w"]
    assert (two["workers"], two["busiest_share_bound"]) == (2, 0.5)  # 1/2 over the hot key's 13 %
    assert workers_of("ballast-2w") == 2 and workers_of("ballast") == workers_of("peer-1s") == 8


def test_the_busiest_share_is_read_from_the_offsets_each_steady_batch_read() -> None:
    batches = [
        {"id": 0, "rows": 100, "end_offsets": [100, 0, 0]},  # warm-up: left out
        {"id": 1, "rows": 100, "end_offsets": [160, 20, 20]},
        {"id": 2, "rows": 40, "end_offsets": [160, 60, 20]},  # under the cap: left out
        {"id": 3, "rows": 100, "end_offsets": [185, 110, 45]},
    ]
    assert busiest_shares(batches, warmup=1, cap=100) == [0.6, 0.5]


def test_the_peer_reads_a_keys_rows_in_offset_order_without_the_late_ones() -> None:
    import pandas as pd

    from bench.reduce.peer import fresh_records

    one = pd.DataFrame({"offset": [5, 3, 9], "event_time": [50, 30, 90], "value": [1.0, 2.0, 3.0]})
    records = fresh_records(iter([one]), watermark=40)
    assert records.event_time.tolist() == [50, 90] and records.value.tolist() == [1.0, 3.0]
    parts = [one.iloc[:1], one.iloc[1:]]  # several frames: concatenated, then ordered
    both = fresh_records(iter(parts), watermark=0)
    assert both.event_time.tolist() == [30, 50, 90] and both.value.tolist() == [2.0, 1.0, 3.0]


def test_a_step_at_the_end_of_a_batch_counts_in_that_batch_only() -> None:
    # a backlog keeps batches back to back: the next starts 5 ms after one ends
    batches = [
        {"id": 0, "rows": 100, "start_ms": 0, "duration_ms": 1000},
        {"id": 1, "rows": 100, "start_ms": 1005, "duration_ms": 1000},
        {"id": 2, "rows": 100, "start_ms": 2010, "duration_ms": 1000},
    ]
    workers = [
        {"at_ms": 400, "worker": 0, "records": 50},
        {"at_ms": 990, "worker": 1, "records": 50},  # the last task of batch 0
        {"at_ms": 1500, "worker": 0, "records": 50},
        {"at_ms": 1990, "worker": 1, "records": 50},  # the last task of batch 1
        {"at_ms": 2500, "worker": 0, "records": 50},
        {"at_ms": 3000, "worker": 1, "records": 50},
    ]
    r = Run("ballast", "b", 0, "j", 0.0, batches, workers)
    assert [sum(w["records"] for w in batch_steps(r, b)) for b in batches] == [100, 100, 100]
