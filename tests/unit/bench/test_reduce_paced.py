"""The paced runs' pure pieces: each record's latency to the batch that read it, the drift that
tells a contender that kept up from one that fell behind, and the plan of a seed's paced runs."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from bench.reduce.paced import latency_summary, record_latencies
from bench.reduce.params import Params
from bench.reduce.skew import paced_plan, paced_summary

pytestmark = pytest.mark.unit


def stamps_of(times_by_partition: dict[int, list[int]]) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    return {p: (np.arange(len(t)), np.array(t)) for p, t in times_by_partition.items()}


def test_each_record_counts_once_against_the_end_of_the_batch_that_read_it() -> None:
    stamps = stamps_of({0: [100, 200, 300, 400], 1: [150, 250]})
    batches = [
        {"id": 0, "start_ms": 500, "duration_ms": 100, "end_offsets": [2, 1]},  # ends at 600
        {"id": 1, "start_ms": 700, "duration_ms": 300, "end_offsets": [4, 2]},  # ends at 1000
    ]
    times, lats = record_latencies(batches, stamps, from_ms=0)
    assert times.tolist() == [100, 150, 200, 250, 300, 400]
    assert lats.tolist() == [500, 450, 400, 750, 700, 600]


def test_records_routed_before_the_warm_up_ends_are_left_out() -> None:
    stamps = stamps_of({0: [100, 200, 300, 400]})
    batches = [{"id": 0, "start_ms": 500, "duration_ms": 100, "end_offsets": [4]}]
    times, lats = record_latencies(batches, stamps, from_ms=250)
    assert times.tolist() == [300, 400] and lats.tolist() == [300, 200]


def test_offsets_without_a_record_and_batches_that_read_nothing_are_no_records() -> None:
    # offsets 1 and 3 are transaction markers: no record, no stamp
    stamps = {0: (np.array([0, 2, 4]), np.array([10, 20, 30]))}
    batches = [
        {"id": 0, "start_ms": 50, "duration_ms": 10, "end_offsets": [3]},
        {"id": 1, "start_ms": 70, "duration_ms": 10, "end_offsets": [3]},  # nothing new
        {"id": 2, "start_ms": 90, "duration_ms": 10, "end_offsets": [5]},
    ]
    _, lats = record_latencies(batches, stamps, from_ms=0)
    assert lats.tolist() == [50, 40, 70]


def test_drift_tells_a_contender_that_kept_up_from_one_that_fell_behind() -> None:
    steady = np.full(400, 1500)
    behind = np.linspace(1000, 9000, 400)
    assert latency_summary(steady)["drift_ms"] == 0
    assert latency_summary(behind)["drift_ms"] > 5000
    s = latency_summary(np.arange(1, 101))
    assert (s["records"], s["latency_p50_ms"], s["latency_max_ms"]) == (100, 50, 100)
    assert latency_summary(np.zeros(0))["latency_p99_ms"] is None


def test_the_paced_rate_is_a_fraction_of_the_best_peer_and_best_names_it() -> None:
    drained = [
        {"contender": "ballast", "records_per_s": 3000.0},
        {"contender": "peer-1s", "records_per_s": 2000.0},
        {"contender": "apply-1s", "records_per_s": 1800.0},
    ]
    params = replace(Params(), sk_paced_fraction=0.8, sk_paced_contenders="ballast,best,peer-1s")
    assert paced_plan(params, drained) == (1600.0, ["ballast", "peer-1s"])
    fixed = replace(params, sk_paced_rate=1234.0, sk_paced_contenders="ballast,apply-1s")
    assert paced_plan(fixed, []) == (1234.0, ["ballast", "apply-1s"])
    with pytest.raises(ValueError, match="sk-paced-rate"):
        paced_plan(replace(params, sk_paced_rate=1000.0), [])  # 'best' needs drained runs
    with pytest.raises(ValueError, match="unknown contenders"):
        paced_plan(replace(fixed, sk_paced_contenders="ballast,nope"), [])


def test_the_paced_summary_pairs_ballast_with_the_peer_of_its_seed() -> None:
    def paced(contender: str, seed: int, p99: int) -> dict:
        return {"contender": contender, "seed": seed, "rate": 1600.0, "records": 100,
                "latency_p50_ms": p99 // 2, "latency_p99_ms": p99, "drift_ms": 10,
                "check": {"missing": 0, "unexpected": 0, "different": 0, "repeated_rows": 0}}  # fmt: skip

    s = paced_summary([paced("ballast", 1, 3000), paced("peer-1s", 1, 6000), paced("ballast", 2, 4000),
                       paced("peer-4s", 2, 5000)])  # fmt: skip
    assert [r["ratio"] for r in s["ballast_p99_over_peer"]] == [0.5, 0.8]
    three = [paced("ballast-routed", 1, 9000), paced("ballast", 1, 3000), paced("peer-1s", 1, 6000)]
    routed = paced_summary(three)
    assert [(r["subject"], r["ratio"]) for r in routed["ballast_p99_over_peer"]] == [
        ("ballast", 0.5),
        ("ballast-routed", 1.5),
    ]
    assert routed["ballast_p99_over_peer_median"] == 0.5
    assert s["ballast_p99_over_peer_median"] == 0.65
    assert s["paced"]["ballast"]["latency_p99_ms_median"] == 3500


def test_an_earlier_report_of_the_same_backlogs_is_kept_and_what_runs_again_replaced(tmp_path) -> None:
    import json
    from dataclasses import asdict

    from bench.reduce.skew import earlier_runs, merged

    earlier = replace(Params(), sk_warmup_batches=0, sk_cap=10)
    batches = [{"id": 0, "rows": 10, "end_offsets": [7, 3]}, {"id": 1, "rows": 10, "end_offsets": [9, 11]}]
    runs = [
        {"contender": "ballast", "z": 1.0, "seed": 11, "records_per_s": 3000.0, "batches_kept": batches},
        {"contender": "peer-1s", "z": 1.0, "seed": 11, "records_per_s": 2000.0, "mode": "drain"},
        {"contender": "ballast", "z": 1.0, "seed": 11, "mode": "paced"},
    ]
    path = tmp_path / "skew.json"
    path.write_text(json.dumps({"params": asdict(earlier), "runs": runs}))
    now = replace(Params(), sk_modes="paced", sk_from=str(path))
    got = earlier_runs(now)
    assert [(r["mode"], r["contender"]) for r in got] == [
        ("drain", "ballast"),  # a report from before the modes: drained
        ("drain", "peer-1s"),
        ("paced", "ballast"),
    ]
    assert got[0]["busiest_worker_share_p50"] == 0.75  # 7/10, then 8/10: from the offsets
    fresh = [{"mode": "paced", "contender": "ballast", "new": True}]
    assert [r.get("new", False) for r in merged(got, fresh)] == [False, False, True]
    with pytest.raises(ValueError, match="sk_events"):
        earlier_runs(replace(now, sk_events=5))


def test_each_batch_reads_from_where_the_batch_before_ended_and_an_unknown_end_reads_nothing() -> None:
    from bench.reduce.progress import offsets_read

    batches = [
        {"id": 1, "end_offsets": [5, -1]},
        {"id": 0, "end_offsets": [2, 3]},  # out of order: read in id order
        {"id": 2, "end_offsets": [9, 4]},
    ]
    assert [ranges for _, ranges in offsets_read(batches)] == [
        [(0, 0, 2), (1, 0, 3)],
        [(0, 2, 5), (1, 3, 3)],
        [(0, 5, 9), (1, 3, 4)],
    ]
