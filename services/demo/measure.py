"""A finished run read back from its topics: the series and figures of its :class:`RunSummary`.

Why from the topics and not from the services' own words alone: the imbalance is counted from the
routed topic (every data record, by the partition it landed in: what the workers really got), the
results are judged row by row against the truth computed from the input the demo produced
(:mod:`ballast.harness.judge`), and only the time lag, the micro-batches and the decisions come from
what the services published (the shedder's ``LagSample``, the reduce's ``ReduceProgress``, the
control log), because they are what the report shows them doing.
"""

from __future__ import annotations

import warnings
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np

from ballast.control.log import ControlLogReader
from ballast.control.state import initial_state
from ballast.harness import judge
from ballast.harness.control_series import applied_at, keep_series
from ballast.harness.events import Events
from ballast.harness.outputs import output_rows
from ballast.harness.routed import routed_records
from ballast.metrics.records import LagSample, ReduceProgress
from services.demo.deployment import DemoRun
from services.demo.summary import RunSummary

LEAD_MS = 10_000  # the series start this long before the stream (the start-up is not the story)


def interval_imbalance(times: Sequence[int], workers: Sequence[int], start_ms: int, end_ms: int,
                       interval_ms: int, n_workers: int) -> list[list[float]]:  # fmt: skip
    """Per interval of event time in [start, end): [t_s of its start, max/mean over the workers of
    the records routed to each] (intervals with no record are left out)."""
    t = np.asarray(times, dtype=np.int64)
    w = np.asarray(workers, dtype=np.int64)
    inside = (t >= start_ms) & (t < end_ms)
    bins = (t[inside] - start_ms) // interval_ms
    n = int((end_ms - start_ms + interval_ms - 1) // interval_ms)
    load = np.zeros((n, n_workers))
    np.add.at(load, (bins, w[inside]), 1)
    out = []
    for i, row in enumerate(load):
        if row.sum() > 0:
            out.append([round(i * interval_ms / 1000, 3), round(float(row.max() / row.mean()), 4)])
    return out


def lag_series(samples: Sequence[tuple[int, LagSample]], start_ms: int) -> list[list[float | None]]:
    """Per measurement (the shedder's cycle): [t_s, router lag, reduce lag], each the largest
    partition's (None: not known then)."""
    by_time: dict[int, dict[str, float]] = defaultdict(dict)
    for at, s in samples:
        if np.isnan(s.lag_seconds):
            continue
        stage = by_time[at]
        stage[s.stage] = max(stage.get(s.stage, 0.0), float(s.lag_seconds))
    return [
        [round((at - start_ms) / 1000, 3), _r(v.get("router")), _r(v.get("reduce"))]
        for at, v in sorted(by_time.items())
    ]


def _keys(entries: Any) -> list[str]:
    """The keys of a table-like field (a map, or a list of keys or of entries with a key)."""
    if not entries:
        return []
    if isinstance(entries, dict):
        return [str(k) for k in entries]
    return [str(x["key"]) if isinstance(x, dict) else str(x) for x in entries]


def _r(x: float | None, digits: int = 3) -> float | None:
    return None if x is None else round(float(x), digits)


def control_series(events: list[dict[str, Any]], start_ms: int) -> tuple[list[list[Any]], list[list[float]]]:
    """The control log's migrations ([t_s, epoch, phase, keys]) and table sizes ([t_s, epoch, size])."""
    migrations, table = [], []
    pinned: set[str] = set()
    for e in events:
        t = round((int(e["issued_at"]) - start_ms) / 1000, 3)
        body = e["payload"][1] if isinstance(e.get("payload"), (tuple, list)) else {}
        if e["type"] == "MIGRATION_STEP":
            keys = body.get("keys") or []
            migrations.append([t, int(e["epoch"]), str(body.get("phase", "")), len(keys)])
        elif e["type"] in ("ROUTING_UPDATE", "TABLE_SNAPSHOT"):
            if e["type"] == "TABLE_SNAPSHOT":
                pinned = set(_keys(body.get("table")))
            pinned |= set(_keys(body.get("assign")))
            pinned -= set(_keys(body.get("unassign")))
            table.append([t, int(e["epoch"]), len(pinned)])
    return migrations, table


def read_run(run: DemoRun, summary: RunSummary, start_ms: int, end_ms: int, events: Events | None,
             window_ms: int) -> None:  # fmt: skip
    """Fill ``summary`` from the run's topics; ``events`` (all the input, Connect's included, with
    the times stamped on them) judges the results, None when the run did not close its windows."""
    s, kafka, layout = run.s, run.kafka, run.layout
    times, workers = routed_records(kafka, layout.name("routed"))
    summary.imbalance = interval_imbalance(times, workers, start_ms, end_ms, int(s.interval_s * 1000),
                                           layout.workers)  # fmt: skip
    reader = run.pipe.metrics()
    reader.read_to_end()
    since = start_ms - LEAD_MS
    samples = [(m.interval_end, b) for m, b in reader.of(LagSample) if m.interval_end >= since]
    summary.lag = lag_series(samples, start_ms)
    summary.batches = [
        [round((m.interval_end - start_ms) / 1000, 3), int(b.durations_ms.get("triggerExecution", 0)),
         b.input_rows]
        for m, b in reader.of(ReduceProgress, source=f"{run.job}/driver")
    ]  # fmt: skip
    log = ControlLogReader(kafka, layout.name("control"), initial_state(layout.workers), start_offset=0)
    try:
        control = log.read_to_end()
    finally:
        log.close()
    summary.migrations, summary.table = control_series(control, start_ms)
    keeps = keep_series(control, run.input_topic)
    summary.keep = [[round((k["at_ms"] - start_ms) / 1000, 3), k["keep"]] for k in keeps]
    if events is not None:
        judge_results(run, summary, events, keeps, start_ms, window_ms)


def judge_results(run: DemoRun, summary: RunSummary, events: Events, keeps: list[dict[str, Any]],
                  start_ms: int, window_ms: int) -> None:  # fmt: skip
    """Every output row against the truth; the shedding span runs from the first keep below 1 to when
    the routers applied the last lift (or to the end)."""
    rows = output_rows(run.kafka, run.layout.name("output"), run.job)
    expected = judge.truth(events, window_ms)
    shed_from = next((k["at_ms"] for k in keeps if k["keep"] < 1.0), None)
    lift = keeps[-1] if keeps and keeps[-1]["keep"] >= 1.0 else None
    until = None if lift is None else (applied_at(lift["epoch"], run.markers) or int(lift["at_ms"]))
    with warnings.catch_warnings():  # a window start with no shed window has no mean: None, not a warning
        warnings.simplefilter("ignore", RuntimeWarning)
        lines = judge.judged(rows, expected, shed_from, until, window_ms)
        results = judge.checks(rows, lines, expected)
        cov = judge.coverage(lines)
        over_time = judge.over_time(lines)
    results.pop("exact_wrong_examples", None)
    summary.figures["results"] = results
    summary.figures["coverage"] = cov
    summary.result_error = [
        [round((x["window_start"] - start_ms) / 1000, 3), x["windows"], x["shed"], x["count_error_p50"],
         x["count_covered"]]
        for x in over_time
    ]  # fmt: skip
