"""DS2 scaling end to end (issue 31, acceptance 3): a sustained 2× step scales the reduce up, the
shedder decides nothing while the scale-up warms up, the input halves and the reduce scales down
after its delay; every output row equals the reference across every action.

Real processes on the session's broker: one router, the Spark reduce (local master, 8 task slots,
8 routed partitions, starting on 1 hashed worker), the controller with ``--scaling on`` and the
shedder. The reduce pays a known cost per record, 6 ms of *sleep* (``--record-cost-kind sleep``):
it stands for blocking I/O (a lookup, a model call), so the worker tasks of one batch wait side by
side and more hashed workers add capacity on this 2-core machine; a CPU cost could not show it.

Measured here, a batch costs ~3.3 s whatever its rows (more on a loaded machine) plus its rows'
cost. At a 20 s trigger one worker then carries (20 - 3.3) / (0.006 × 20) = 139 records/s with
each batch inside the trigger (the controller's batch model, docs/scaling.md), 112/s if the fixed
cost doubles under load. The input runs at 90/s (one worker while the fixed cost stays under
9.2 s), steps to 180/s (two or more, and past what one worker carries even with batches
stretched: 167/s) and stays there until the reduce has scaled up and the shedder has had time to
lift, then halves back to 90/s until the reduce has scaled down. Phases end on what the control
log says, not on a clock, so a loaded machine makes the test longer, not wrong. At 4 ms and
140/s -> 280/s, run in CI beside another pipeline, the reduce did not scale back down within 8
minutes: the loaded machine left one worker no room at the base rate. Hence the margin there.

The shedder runs ``--dry-run``: it decides every cycle and logs it, and sheds nothing, so every
window is exact and judged against the reference (applied shedding and its estimates are judged
by the demo and the chaos campaign). Its decisions are read from its log.
"""

from __future__ import annotations

import itertools
import re
import time
from pathlib import Path
from typing import Any

import pytest

from ballast.control.log import ControlLogReader
from ballast.control.state import initial_state
from ballast.waiting import wait_until
from ballast.workload import FLUSH_KEY
from services.controller.scaling.replay import replay
from tests.support import reduce_reference
from tests.support.output_judge import assert_rows_right, judge
from tests.support.reduce_kit import WORKERS, ReduceKit, reduce_events

pytestmark = pytest.mark.e2e

BASE, STEP = 90, 180  # events/s: within one worker with room for a loaded machine, then past it
WARM_S = 60  # at BASE before the step: the batch model gets its first batches
AFTER_UP_S = 30  # at STEP after the scale-up: the shedder's hold (20 s) is over before the halving
LONGEST_PHASE_S = 480  # a phase that has not seen its decision by then fails the test
CYCLE_S, HOLD_S = 2, 20
TRIGGER_S = 20
SCALE_DOWN_DELAY_S = 40
WINDOW_MS = 2000
EVENTS = 400_000  # more than the longest run can use; sliced as it goes


def control_events(kit: ReduceKit) -> list[dict[str, Any]]:
    reader = ControlLogReader(kit.kafka, kit.layout.name("control"), initial_state(WORKERS), start_offset=0)
    try:
        return reader.read_to_end(60)
    finally:
        reader.close()


def reduce_scales(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The controller's applied reduce decisions (the kit's own starting SCALE is not one)."""
    return [
        e["payload"][1] | {"epoch": e["epoch"], "issued_at": e["issued_at"]}
        for e in events
        if e["type"] == "SCALING"
        and e["payload"][1]["stage"] == "reduce"
        and e["payload"][1]["mode"] == "APPLIED"
    ]


class Feed:
    """The input, produced one second at a time at the phase's rate, until a condition holds."""

    def __init__(self, kit: ReduceKit) -> None:
        self.kit = kit
        self.events = reduce_events(EVENTS, num_keys=300, z=0.0, seed=31, per_ms=1)
        self.sent = 0

    def run(self, rate: int, until: Any, at_least_s: float = 0.0, what: str = "") -> float:
        """Produce at ``rate`` for ``at_least_s`` and then until ``until()`` (asked every 2 s); the
        seconds it took. What is owed is worked out from the clock, so a slow ``until`` (it reads
        the control log) does not lower the rate."""
        began = time.monotonic()
        phase_sent, next_ask = 0, began + at_least_s
        while True:
            now = time.monotonic()
            if now >= next_ask:
                if until():
                    return now - began
                next_ask = time.monotonic() + 2.0
            if now - began > LONGEST_PHASE_S:
                raise AssertionError(f"{what}: not seen after {LONGEST_PHASE_S} s at {rate} events/s")
            owed = int(rate * (now - began)) - phase_sent
            assert self.sent + owed <= len(self.events), "the run outgrew its events"
            if owed > 0:
                self.kit.produce(self.events[self.sent : self.sent + owed])
                self.sent += owed
                phase_sent += owed
            time.sleep(0.2)

    @property
    def produced(self) -> list[dict[str, Any]]:
        return self.events[: self.sent]


def shedder_cycles(log: str) -> tuple[list[int], dict[int, list[int]]]:
    """Cycle numbers of the shedder's SHEDDING decisions, and of its cycles held for a scaling
    action, by the action's epoch."""
    shedding = [int(n) for n in re.findall(r"cycle (\d+): SHEDDING:", log)]
    held: dict[int, list[int]] = {}
    for cycle, epoch in re.findall(r"cycle (\d+): no decision: the scaling action at epoch (\d+)", log):
        held.setdefault(int(epoch), []).append(int(cycle))
    return shedding, held


@pytest.fixture(scope="module")
def scaled(kafka_config, tmp_path_factory) -> Any:
    workdir = tmp_path_factory.mktemp("scaling")
    kit = ReduceKit(kafka_config, f"scale-{workdir.name}", workdir, active_workers=1)
    try:
        kit.start_router("r1", stats_interval_s=1)
        kit.start_job(
            "agg", f"aggregate:size={WINDOW_MS // 1000}s", "--trigger", f"{TRIGGER_S} seconds",
            "--local-cores", "8", "--record-cost-us", "6000", "--record-cost-kind", "sleep",
            "--watermark-delay", "4 seconds",
        )  # fmt: skip
        kit.pipe.start(kit.pipe.controller(
            "c1", rebalance=False, scaling="on", scaling_interval_s=10, scaling_warmup=1,
            scaling_activation=2, scale_down_delay_s=SCALE_DOWN_DELAY_S, reduce_trigger_s=TRIGGER_S,
            status_every_s=1,
        ))  # fmt: skip
        kit.pipe.start(kit.pipe.shedder(
            f"topic={kit.input},target=60s,priority=0,min-accuracy=0.5", reduce_jobs="agg",
            cycle_s=CYCLE_S, scaling_hold_s=HOLD_S, dry_run=True,
        ))  # fmt: skip
        for name in ("router-r1", kit.jobs["agg"]):
            kit.pipe.wait_ready(name, 300)
        # the query's first batch (workers spawned, state opened) before the input starts
        kit.pipe.wait_ready("shedder", 120)
        wait_until(lambda: kit.pipe.reduce_progress("agg"), 300, "the reduce's first batch", 2.0)
        feed = Feed(kit)
        feed.run(BASE, lambda: True, WARM_S)
        assert not reduce_scales(control_events(kit)), control_events(kit)  # BASE is within one worker
        feed.run(STEP, lambda: bool(reduce_scales(control_events(kit))), what="a reduce scale-up")
        feed.run(STEP, lambda: True, AFTER_UP_S)
        halved_at_ms = int(time.time() * 1000)
        shedder_log = Path(kit.pipe.service("shedder").log)
        shed_before_halving = shedder_log.read_text()

        def scaled_down() -> bool:
            return any(
                d["to_instances"] < d["from_instances"] and d["issued_at"] > halved_at_ms
                for d in reduce_scales(control_events(kit))
            )

        feed.run(BASE, scaled_down, what="a reduce scale-down")
        feed.run(BASE, lambda: True, 10)  # the smaller reduce works on
        produced = feed.produced
        last = max(e["event_time"] for e in produced)
        kit.flush_after(len(produced), last, timeout=600)
        expected = reduce_reference.expected_aggregates(produced, WINDOW_MS)
        kit.wait_results("agg", expected, timeout=600)
        yield {
            "kit": kit, "expected": expected, "events": control_events(kit), "halved_at_ms": halved_at_ms,
            "shedder_log": shed_before_halving, "shedder_log_end": shedder_log.read_text(),
        }  # fmt: skip
    finally:
        kit.close()


def test_the_step_scales_the_reduce_up_and_the_halving_scales_it_down_after_the_delay(scaled) -> None:
    decisions = reduce_scales(scaled["events"])
    ups = [d for d in decisions if d["to_instances"] > d["from_instances"]]
    downs = [d for d in decisions if d["to_instances"] < d["from_instances"]]
    assert ups and ups[0]["from_instances"] == 1 and ups[0]["to_instances"] >= 2, decisions
    assert [d for d in downs if d["issued_at"] > scaled["halved_at_ms"]], decisions  # the halving did
    # every scale-down came after its delay: each estimate of it asked for the drop, and the history
    # of those estimates starts afresh at each decision
    for before, d in itertools.pairwise(decisions):
        if d in downs:
            assert d["issued_at"] - before["issued_at"] >= SCALE_DOWN_DELAY_S * 1000, (before, d)
    # no count revisited: up to a peak, then down
    counts = [1] + [d["to_instances"] for d in decisions]
    peak = counts.index(max(counts))
    assert counts[: peak + 1] == sorted(counts[: peak + 1]), counts
    assert counts[peak:] == sorted(counts[peak:], reverse=True), counts
    # each applied reduce decision is followed by its SCALE to that many hashed workers
    events = scaled["events"]
    for d in decisions:
        at = next(i for i, e in enumerate(events) if e["epoch"] == d["epoch"])
        assert events[at + 1]["type"] == "SCALE", events[at + 1]
        assert events[at + 1]["payload"][1]["num_workers"] == d["to_instances"]
    # and the log alone replays to those counts
    assert replay(events, {"router": 1, "reduce": 1}).counts["reduce"] == decisions[-1]["to_instances"]


def test_the_shedder_decides_nothing_while_the_scale_up_warms_up(scaled) -> None:
    """Read from the shedder's log up to the halving: it held for the scale-up's SCALING or SCALE
    (``--scaling-hold-s``), and decided nothing in those cycles: rates measured while state moves
    are the reconfiguration's. Not asserted: that it stops asking to shed within 3 cycles. Dry-run,
    it sheds nothing, so the step's backlog is still there after the scale-up and it rightly goes
    on asking until the backlog drains (here 20 cycles and more); that claim needs the shedder
    applied and the shed windows judged (docs/scaling.md, "Still to come")."""
    up = next(d for d in reduce_scales(scaled["events"]) if d["to_instances"] > d["from_instances"])
    shedding, held = shedder_cycles(scaled["shedder_log"])
    hold = sorted(n for epoch in (up["epoch"], up["epoch"] + 1) for n in held.get(epoch, []))
    assert hold, f"the shedder never held for the scale-up at epoch {up['epoch']}: {held}"
    assert hold == list(range(hold[0], hold[-1] + 1)), hold  # one unbroken hold
    assert not [n for n in shedding if hold[0] <= n <= hold[-1]], (shedding, hold)
    print(f"shedder: SHEDDING in cycles {shedding}; held for the scale-up in {hold}")


def test_every_row_equals_the_reference_across_every_scaling(scaled) -> None:
    kit: ReduceKit = scaled["kit"]
    expected = scaled["expected"]
    assert_rows_right(judge(kit.rows("agg"), expected, expected, ignore_keys=[FLUSH_KEY]))
    assert not kit.dead_lettered()
