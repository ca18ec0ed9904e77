"""One placement: its deployment, router process and query, driven slice by slice.

Why a deployment (topic prefix) each: the three placements read the same input, but each routes
it with its own router under its own control log, and (c)'s routing updates must not reach (b).
Every service is a process of the placement's :class:`~ballast.harness.pipeline.Pipeline`, so
the benchmark drives them the way a user would: input into the input topic, ``ballast
controller plan`` for a planning round, progress and statistics read from Kafka.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from ballast.harness.pipeline import Pipeline
from ballast.kafka.configuration import KafkaConfig
from ballast.kafka.topics import TopicLayout
from bench.reduce.batches import Batch, classify
from bench.reduce.params import INPUT_PARTITIONS, STATUS_S, WAIT_S, WORKERS, Params, log
from bench.reduce.queries import BaselineQuery, JobQuery, Query
from bench.reduce.release import SliceRelease
from bench.reduce.workload import Slice

ROUTER = "router"


class Placement:
    def __init__(
        self,
        name: str,
        label: str,
        *,
        spark_grouping: bool,
        updates: bool,
        record_cost_us: float,
        params: Params,
        kafka: KafkaConfig,
        spark: Any,
        workdir: Path,
    ) -> None:
        self.name, self.label = name, label
        self.spark_grouping, self.updates = spark_grouping, updates
        self.params = params
        self.layout = TopicLayout(prefix=f"bench-{name}", workers=WORKERS, input_partitions=INPUT_PARTITIONS)
        specs = dict(self.layout.specs())
        if spark_grouping:
            from bench.reduce.baseline import LOAD_ROLE, load_spec

            specs[LOAD_ROLE] = load_spec(self.layout)
        self.pipe = Pipeline(
            kafka, self.layout, workdir / f"pipeline-{name}", specs=specs, issuer="bench-reduce"
        )
        self.router = ROUTER
        self.pipe.start(
            self.pipe.router(
                f"{self.layout.prefix}-router",
                name=ROUTER,
                exactly_once=True,
                commit_when_idle=True,  # a slice (one input transaction) is routed in one transaction
                commit_interval_ms=3_600_000,  # so never on a timer
                stats_interval_s=0.5,  # key statistics soon after each slice, for the planning round
                heavy_hitters_top=params.heavy_hitters,
                heavy_hitter_capacity=max(10_000, 2 * params.keys),
                max_poll_interval_ms=3_600_000,
                log_level="warning",
            )
        )
        self.input = SliceRelease(self.pipe, ROUTER, params.trigger_ms)
        self.checkpoint = workdir / f"checkpoint-{name}"
        self.query: Query = (
            BaselineQuery(spark, self.pipe, params, record_cost_us, self.checkpoint)
            if spark_grouping
            else JobQuery(self.pipe, params, record_cost_us, self.checkpoint)
        )
        self.last_planned = -1
        self.slice_batches: dict[tuple[int, int], int] = {}
        self.slice_records: dict[tuple[int, int], int] = {}
        self.updates_sent: list[dict] = []
        self.batches: list[Batch] = []
        self.finished = False

    # --- driving ------------------------------------------------------------------------------------

    def warm_up(self) -> None:
        """Until the query has read the markers of the router's first assignment: Spark's start-up
        and first batch are over before the first slice."""
        self.pipe.wait_epoch(0, WAIT_S)
        self.planned_batch(self.pipe.routed_ends(), "the router's first markers")
        self.drain()

    def release(self, s: Slice) -> dict[int, int]:
        """Release a slice; once routed, the routed topic's ends."""
        self.slice_records[(s.phase, s.index)] = len(s.records)
        return self.input.release(s.records)

    def planned_batch(self, ends: dict[int, int], what: str) -> int:
        """Wait until a planned batch's end offsets cover ``ends``; its id.

        Read from the checkpoint's offset log, which Spark writes when it plans a batch, before
        running it: the next slice can be released while this batch runs.
        """
        topic = self.layout.name("routed")
        offsets_dir = self.checkpoint / "offsets"
        seen = self.last_planned
        started = last = time.monotonic()
        while True:
            self.query.check()
            ids = (
                sorted(int(f.name) for f in offsets_dir.iterdir() if f.name.isdigit())
                if offsets_dir.exists()
                else []
            )
            for b in (i for i in ids if i > seen):
                text = (offsets_dir / str(b)).read_text().splitlines()
                try:
                    planned = json.loads(text[2])[topic]
                except (IndexError, KeyError, ValueError):
                    break  # still being written
                if all(int(planned.get(str(p), 0)) >= end for p, end in ends.items()):
                    self.last_planned = b
                    return b
                seen = b
            now = time.monotonic()
            if now - started > WAIT_S:
                raise TimeoutError(f"{self.label}: no batch planned for {what}")
            if now - last > STATUS_S:
                last = now
                log(f"{self.label}: waiting for the batch of {what} ({now - started:.0f} s)")
            time.sleep(0.05)

    def drain(self) -> None:
        """Wait until the last planned batch has run and nothing routed is left unread (chunks included)."""
        started = last = time.monotonic()
        while True:
            self.query.check()
            ends = self.pipe.routed_ends()
            latest = self._latest_planned()
            done = self.query.progress().get(latest) if latest is not None else None
            if done is not None and done.covers(ends) and self.pipe.routed_ends() == ends:
                return
            now = time.monotonic()
            if now - started > WAIT_S:
                raise TimeoutError(f"{self.label}: did not drain")
            if now - last > STATUS_S:
                last = now
                log(f"{self.label}: draining ({now - started:.0f} s)")
            time.sleep(0.2)

    def _latest_planned(self) -> int | None:
        d = self.checkpoint / "offsets"
        ids = [int(f.name) for f in d.iterdir() if f.name.isdigit()] if d.exists() else []
        return max(ids) if ids else None

    def plan_update(self, phase: int, since_ms: int, records: int) -> dict:
        """One planning round of the controller (``ballast controller plan``) from the router
        statistics of the prefix (intervals ended since ``since_ms``, covering its ``records``);
        once sent, until the router announced the new epoch in every routed partition."""
        started = time.monotonic()
        plan = self.pipe.plan(
            self.params.theta,
            records=records,
            since_ms=since_ms,
            issuer="bench-reduce",
            reason=f"bench-reduce phase {phase}",
        )
        if plan["sent"]:
            self.pipe.wait_epoch(int(plan["epoch"]), WAIT_S)
        info = {
            "phase": phase,
            "epoch": int(plan["epoch"]),
            "heavy_hitters": int(plan["heavy_hitters"]),
            "table": int(plan["table_size"]),
            "assign": len(plan["assign"]),
            "unassign": len(plan["unassign"]),
            "feasible": bool(plan["feasible"]),
            "planned_max_over_mean": round(float(plan["predicted_max_mean"]), 3),
            "plan_ms": round(float(plan["plan_ms"]), 1),
            "round_s": round(time.monotonic() - started, 1),  # the command, its reads and the epoch
        }
        self.updates_sent.append(info)
        return info

    # --- the end -------------------------------------------------------------------------------------

    def finish(self) -> None:
        """Stop the query and the router, and keep what every batch did (before the topics go)."""
        if self.finished:
            return
        self.finished = True
        self.query.stop()
        self.batches = classify(self.query.progress(), self.query.samples(), self.slice_batches)
        self.close()

    def close(self) -> None:
        """Every service of the placement stopped, every client closed; safe to call twice."""
        try:
            if not self.finished:
                self.query.stop()
        finally:
            self.input.close()
            self.pipe.close()
