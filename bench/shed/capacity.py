"""The pipeline's capacity and its lag when keeping up, measured before the cases.

Why measured and not taken from the per-record cost: the reduce also pays per batch (planning,
the state store's commit, the output's write) and per record outside the sleep, on a machine
shared with other work. The capacity is what the job sustains while it has a backlog:

1. a deployment of its own (``bench-shed-cal``): the router and the reduce, as in the cases;
2. ``calibration_records`` produced at once (the router routes them within seconds: it is far
   faster than the reduce), read by the job in back-to-back batches;
3. capacity = the records of the batches that read the backlog over the time from the first one's
   start to the last one's end (gaps between batches included: the rate a backlog drains at);
4. then ``calm_s`` of input at ``calm_rate`` × that capacity, sampled as the cases sample
   (:mod:`bench.shed.lag`): the lag the pipeline has when it keeps up (a trigger interval plus a
   batch, plus the router's transaction), which the target must be at least twice.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from ballast.harness.feed import Feeder, Phase
from ballast.kafka.configuration import KafkaConfig
from ballast.metrics.records import ReduceProgress
from bench.shed.case import SETTLE_S, Deployment, sequence
from bench.shed.params import STATUS_S, WAIT_S, Params, log
from bench.shed.verdicts import lag_summary


def drain_rate(batches: list[dict[str, Any]], after_ms: int) -> dict[str, Any]:
    """Records per second over the batches with rows that started at or after ``after_ms``, from
    the first one's start to the last one's end."""
    rows = [b for b in batches if b["start_ms"] >= after_ms and b["rows"] > 0]
    if not rows:
        return {"capacity": 0.0, "batches": 0, "records": 0, "span_s": 0.0}
    span = (rows[-1]["start_ms"] + rows[-1]["duration_ms"] - rows[0]["start_ms"]) / 1000
    records = sum(b["rows"] for b in rows)
    return {
        "capacity": records / span if span > 0 else 0.0,
        "batches": len(rows),
        "records": records,
        "span_s": round(span, 2),
    }


def calibrate(params: Params, kafka: KafkaConfig, workdir: Path) -> dict[str, Any]:
    """The capacity (drain of a backlog) and the natural lag (calm input at that capacity's share)."""
    began = time.monotonic()
    d = Deployment("cal", params, kafka, workdir)
    try:
        d.up(controller=False, shedder=False)
        log(f"calibration: services up ({time.monotonic() - began:.0f} s); "
            f"{params.calibration_records:,} records at once")  # fmt: skip
        n = params.calibration_records
        backlog = [Phase("backlog", n / 2.0, 2.0)]
        backlog_ms = int(time.time() * 1000)
        d.feeder = Feeder(
            kafka, d.input_topic, sequence(params.keys, params.z, params.seed, backlog), backlog
        )
        d.feeder.start()
        d.feeder.join()
        d.feeder.check()
        d.pipe.wait_routed(n, WAIT_S, watch=d.services)
        _wait_read(d, began)
        batches = _batches(d)
        drain = drain_rate(batches, backlog_ms)
        capacity = drain["capacity"]
        log(f"calibration: {drain['records']:,} records in {drain['batches']} batches over "
            f"{drain['span_s']} s: capacity {capacity:,.0f} records/s")  # fmt: skip
        if capacity <= 0:
            raise RuntimeError("calibration: no batch read the backlog")
        calm = [Phase("calm", params.calm_rate * capacity, params.calm_s)]
        calm_from = int(time.time() * 1000) + int(SETTLE_S * 1000)
        d.feeder = Feeder(kafka, d.input_topic, sequence(params.keys, params.z, params.seed + 1, calm), calm)
        d.feeder.start()
        last = time.monotonic()
        while d.feeder.is_alive():
            d.check()
            s = d.sample()
            if time.monotonic() - last >= STATUS_S:
                last = time.monotonic()
                log(f"calibration: calm input, lag router {s['router_s']} s + reduce {s['reduce_s']} s")
            time.sleep(params.sample_s)
        d.feeder.stop()
        lag = lag_summary(d.samples, calm_from)
        log(f"calibration: lag when keeping up p50 {lag['p50_s']} s, p90 {lag['p90_s']} s, "
            f"max {lag['max_s']} s ({time.monotonic() - began:.0f} s)")  # fmt: skip
        return {
            "drain": drain,
            "capacity": round(capacity, 1),
            "natural_lag": lag,
            "lag_samples": d.samples,
            "batches": batches,
            "run_s": round(time.monotonic() - began, 1),
        }
    finally:
        d.close()


def _batches(d: Deployment) -> list[dict[str, Any]]:
    return [
        {"id": p.batch_id, "start_ms": m.interval_start, "rows": p.input_rows,
         "duration_ms": int(p.durations_ms.get("triggerExecution", 0))}
        for m, p in d.pipe.metrics().of(ReduceProgress, source=f"{d.job}/driver")
    ]  # fmt: skip


def _wait_read(d: Deployment, began: float) -> None:
    """Until the job has read everything routed so far (progress lines while it drains)."""
    ends = d.pipe.routed_ends()
    last = time.monotonic()
    while not any(b.covers(ends) for b in d.progress()):
        d.check()
        if time.monotonic() - last >= STATUS_S:
            last = time.monotonic()
            rows = sum(b.input_rows for b in d.progress())
            log(f"calibration: draining, {rows:,} records read ({time.monotonic() - began:.0f} s)")
        if time.monotonic() - began > WAIT_S:
            raise TimeoutError("calibration: the backlog was not read in time")
        time.sleep(0.5)
