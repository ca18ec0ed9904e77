"""The controller as a process, driving real routers and a real Spark reduce job (issue: the
controller service, acceptances 3 and 4).

3. **kill -9 in the middle of a paced migration.** A migration of the hot keys, two keys per
   step (``--pacing batched --step-keys 2``), is asked for with ``REBALANCE {"dry_run": false}``
   once load exists. As soon as the control log shows its START and a step but no DONE, the
   controller is frozen (SIGSTOP: it cannot act on that step's installs); once the workers have
   reported them, every process of it is SIGKILLed and it is started again with the same id, so
   the installs it needs were reported before it started. The log is its only memory: the
   restarted one must say it resumes the migration, send each key not sent yet exactly once, and
   close the migration with DONE once the workers reported every key installed at its step's
   epoch. The log's epochs must stay dense from 0 (the fold refuses a gap or a duplicate), and
   every row the reduce job wrote is judged against the single-process reference
   (tests/support/output_judge.py), as in tests/e2e/test_reduce.py.

4. **The closed loop on a drifting Zipf(1.0) stream.** The hot set is drawn anew every 40 s, and
   the controller's interval is 5 s. That is the issue's "shifts every minute" scaled down, so
   a run fits in minutes: what is kept is the ratio of shift period to interval (8 intervals), not
   the wall time. Worker load is measured from the routed topic itself: data records per routed
   partition per 5 s of event time (the producer stamps each event with its scheduled send time),
   so the controller's own figures take no part in the verdict. One deployment, two phases: first
   the controller with ``--no-rebalance`` (load stays above 1 + theta in every interval), then the
   loop on (after each shift the load is back under 1 + theta within 3 intervals, and stays under
   until the next shift).
"""

from __future__ import annotations

import json
import signal
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import numpy as np

from ballast.avro.codec import AvroCodec
from ballast.avro.wire import DATA_PREFIX
from ballast.control.log import ControlLogReader
from ballast.control.requests import ControlClient
from ballast.control.state import initial_state
from ballast.kafka.follow import TopicFollower
from ballast.metrics.records import ControllerStatus
from ballast.routing.murmur2 import kafka_partition
from ballast.waiting import wait_until
from ballast.workload import FLUSH_KEY, key_name, zipf_key_ids
from tests.support import reduce_reference
from tests.support.output_judge import assert_rows_right, judge
from tests.support.reduce_kit import START_MS, WORKERS, ReduceKit

AGG = "aggregate:size=4s,slide=2s"
JOB_ARGS = ("--watermark-delay", "10 seconds", "--max-offsets-per-trigger", "40000")


def control_log(kit: ReduceKit) -> list[dict[str, Any]]:
    """Every event of the control log from its genesis, folded; none skipped (a gap, a duplicate
    epoch or an event the state rejects would be: reading it checks the order)."""
    reader = ControlLogReader(kit.kafka, kit.layout.name("control"), initial_state(WORKERS), start_offset=0)
    try:
        events = reader.read_to_end(60)
        assert not reader.skipped, f"records that are no next event: {dict(reader.skipped)}"
        return events
    finally:
        reader.close()


def migration_story(events: list[dict[str, Any]], mid: str) -> dict[str, list[dict[str, Any]]]:
    """The log's story of migration ``mid``: its MIGRATION_STEP events by phase, and its steps
    (the ROUTING_UPDATEs that carry its id) under ``"STEP"``."""
    story: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        body = e["payload"][1]
        if e["type"] == "MIGRATION_STEP" and body["migration_id"] == mid:
            story[body["phase"]].append(e)
        elif e["type"] == "ROUTING_UPDATE" and body.get("migration_id") == mid:
            story["STEP"].append(e)
    return story


def step_keys(update: dict[str, Any]) -> list[str]:
    body = update["payload"][1]
    return [*body["assign"], *body.get("unassign", [])]


# --- acceptance 3: kill -9 mid-migration ------------------------------------------------------------

KILL_EVENTS = 200_000
KILL_RATE = 4_000  # events/s: what the job keeps up with on 2 shared cores (as in test_reduce.py)
HOT_KEYS = 8  # all hashed to worker 0, 5 % of the records each
HOT_SHARE = 0.4
BACKGROUND_KEYS = 2_000  # the other 60 %, uniform


def eight_hot_keys_on_one_worker(n: int, seed: int = 13) -> list[dict[str, Any]]:
    """Events whose imbalance has one obvious cure: eight keys, each 5 % of the records, all hash to
    worker 0 (47.5 % of the load; 12.5 % is a worker's share), the rest is spread evenly. A level
    plan moves seven of them, one to each other worker, and nothing else is worth moving, so the
    migration has the same few steps in every run (the plans for a Zipf(1.0) stream over 2,000 keys
    moved from 3 to 115 keys here, from one interval to the next: many small keys trade places).
    Values and event times as :func:`tests.support.reduce_kit.reduce_events` (dyadic values, 10
    events per ms, the event's index as payload)."""
    names = (key_name(i) for i in range(1_000))
    hot = [k for k in names if kafka_partition(k.encode(), WORKERS) == 0][:HOT_KEYS]
    background = [key_name(i) for i in range(1_000, 1_000 + BACKGROUND_KEYS)]
    rng = np.random.default_rng(seed)
    is_hot = rng.random(n) < HOT_SHARE
    hot_pick = rng.integers(0, HOT_KEYS, size=n)
    background_pick = rng.integers(0, BACKGROUND_KEYS, size=n)
    values = rng.integers(0, 400, size=n) / 4.0
    return [
        {
            "key": hot[hot_pick[i]] if is_hot[i] else background[background_pick[i]],
            "value": float(values[i]),
            "payload": i.to_bytes(8, "big"),
            "event_time": START_MS + i // 10,
        }
        for i in range(n)
    ]


def ask_for_a_migration(kit: ReduceKit, timeout: float = 180.0) -> str:
    """``REBALANCE {"dry_run": false}`` until the controller has an interval of load to plan from
    (it refuses with ``no-load`` before, and plans nothing on an interval that routed nothing);
    the id of the migration it started, from the log."""
    client = ControlClient(kit.kafka, kit.layout, "controller-e2e")
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            answer = client.request("REBALANCE", {"dry_run": False}, timeout=30)
            if answer.accepted and json.loads(answer.detail)["tracked_keys"] == 0:
                time.sleep(2.0)
                continue
            if answer.accepted:
                starts = [
                    e["payload"][1]["migration_id"]
                    for e in control_log(kit)
                    if e["type"] == "MIGRATION_STEP" and e["payload"][1]["phase"] == "START"
                ]
                assert starts, f"REBALANCE accepted but no migration started: {answer.detail}"
                return starts[-1]
            assert answer.reason == "no-load", f"REBALANCE refused: {answer.reason} {answer.detail}"
            time.sleep(2.0)
    finally:
        client.close()
    raise AssertionError(f"the controller had no load to plan from within {timeout:.0f} s")


def test_kill_9_mid_migration_resumes_from_the_log_and_the_results_stay_exact(kafka_config, tmp_path) -> None:
    """The controller plans what the last interval routed (``--no-forecast``: the forecast would
    extrapolate the noise between two 3 s intervals) in records (``--pricing records``: a plan
    sized by step-time noise varies from run to run; see services/controller/interval_load.py), so
    the plan is the seven hot keys, sent two per step."""
    kit = ReduceKit(kafka_config, f"ctlkill-{tmp_path.name}", tmp_path / "stack")
    events = eight_hot_keys_on_one_worker(KILL_EVENTS)
    controller = kit.pipe.controller(
        "c1",
        rebalance=False,  # no loop of its own: the one migration is the one asked for
        interval_s=3,
        pricing="records",
        forecast=False,
        plan_theta=0.2,
        pacing="batched",
        step_keys=2,
        step_timeout_s=180,  # a step waits for the job's installs however slow the box is
    )
    producing: dict[str, BaseException] = {}

    warm_up = KILL_EVENTS // 10

    def produce() -> None:
        try:
            kit.produce(events[warm_up:], KILL_RATE)
        except BaseException as exc:  # reported by the test's thread
            producing["error"] = exc

    try:
        for rid in ("r1", "r2"):
            kit.start_router(rid)
        kit.start_job("agg", AGG, *JOB_ARGS)
        kit.pipe.start(controller)
        # the job must run before the migration (its installs end each step), and the input must
        # still flow when the controller plans (it plans the last interval's records): the job's
        # start-up, a minute or two on a busy box, is waited for after a first tenth of the input
        kit.produce(events[:warm_up], KILL_RATE)
        kit.wait_stats("agg", lambda s: s.records > 0, timeout=300)
        feeder = threading.Thread(target=produce, daemon=True)
        feeder.start()
        mid = ask_for_a_migration(kit)
        story: dict[str, list[dict[str, Any]]] = {}

        def half_sent() -> bool:
            story.clear()
            story.update(migration_story(control_log(kit), mid))
            assert not story.get("DONE") and not story.get("ABORT"), "the migration ended before the kill"
            return bool(story.get("START")) and len(story.get("STEP", [])) >= 1

        wait_until(half_sent, 300, f"a step of migration {mid} in the log", 0.1)
        # frozen before it can act on the step's installs, killed once the workers reported them:
        # the restarted controller must find installs reported before it started (the hard case)
        kit.pipe.signal(controller.name, signal.SIGSTOP)
        planned = list(story["START"][0]["payload"][1]["keys"])
        assert len(planned) >= 3, f"a migration of {len(planned)} keys is one step: nothing to kill between"
        first = story["STEP"][0]
        wanted = {(k, first["epoch"]) for k in step_keys(first)}
        wait_until(
            lambda: wanted <= {(c.key, c.epoch) for s in kit.worker_stats("agg") for c in s.chunks_installed},
            300, f"step 1 of {mid} installed", 1.0,
        )  # fmt: skip
        kit.pipe.kill(controller.name)  # SIGKILL to every process group of it
        sent_before = len(migration_story(control_log(kit), mid)["STEP"])
        assert 1 <= sent_before < (len(planned) + 1) // 2
        log_before = len(kit.pipe.log(controller.name))
        restarted_ms = int(time.time() * 1000)
        kit.pipe.start(controller)


        def ended() -> bool:
            ending = migration_story(control_log(kit), mid)
            return bool(ending["DONE"] or ending["ABORT"])

        # under CI's concurrent load the last interval can miss a router's report, and the plan then
        # levels what it saw with 60-170 keys instead of 7 (30-85 steps, each waiting for installs):
        # slow, still exact; the time it may take is bounded, not assumed
        wait_until(ended, 1200, f"migration {mid} DONE or ABORT", 1.0)
        feeder.join(600)
        assert not feeder.is_alive() and not producing, producing
        kit.flush_after(len(events), events[-1]["event_time"])
        every = reduce_reference.expected_aggregates(events, 4000, 2000)
        kit.wait_results("agg", every, timeout=600)

        log = control_log(kit)
        epochs = [e["epoch"] for e in log]
        assert epochs == list(range(len(epochs))), "the control log's epochs are not dense from 0"
        story = migration_story(log, mid)
        assert (len(story["START"]), len(story["DONE"]), len(story["ABORT"])) == (1, 1, 0)
        sent = [k for update in story["STEP"] for k in step_keys(update)]
        assert sorted(sent) == sorted(planned), "each planned key is sent in exactly one step"
        assert sorted(story["DONE"][0]["payload"][1]["keys"]) == sorted(planned)
        after = [u for u in story["STEP"] if u["issued_at"] >= restarted_ms]
        assert len(after) == len(story["STEP"]) - sent_before >= 1  # the rest came from the restarted one
        installed = {(c.key, c.epoch) for s in kit.worker_stats("agg") for c in s.chunks_installed}
        moves = [(k, u["epoch"]) for u in story["STEP"] for k in step_keys(u)]
        missing = [m for m in moves if m not in installed]
        assert not missing, f"moves DONE but not installed at their step's epoch: {missing}"
        said = kit.pipe.log(controller.name)[log_before:]
        assert f"resuming migration {mid}" in said, said[-3000:]

        letters = kit.dead_lettered()
        assert {d.reason for d in letters} <= {"late"}, {d.reason for d in letters}
        late = {d.event for d in letters}
        assert None not in late
        kept = [e for i, e in enumerate(events) if i not in late]
        counted = reduce_reference.expected_aggregates(kept, 4000, 2000)
        assert_rows_right(judge(kit.rows("agg"), counted, every, ignore_keys=[FLUSH_KEY]))
    finally:
        kit.close()


# --- acceptance 4: the closed loop on a drifting Zipf(1.0) stream --------------------------------

DRIFT_KEYS = 4_000  # the hottest key is 11 % of the load, under a worker's 12.5 %: a level plan exists
TRACKED = 1_000  # heavy hitters each router publishes: 84 % of the load is movable
DRIFT_RATE = 2_000  # events/s
INTERVAL_S = 5  # the controller's interval, and the test's measuring interval
PERIOD_S = 40  # the hot set is drawn anew every PERIOD_S: 8 intervals
THETA = 0.3
SETTLE = 3  # intervals after a shift within which the loop must be back under 1 + THETA
# Plans aim far below the line the verdict draws: a plan is made from one 5 s interval (10,000
# records; a worker's count varies by about 3 % from sampling alone, and a plan fitted to one
# interval's counts carries that interval's noise), so plans aimed at 1.08 (the default) landed at
# 1.15-1.30 and one interval of 15 came out at 1.304. The loop still reacts only above 1 + THETA.
PLAN_THETA = 0.03
OFF_PERIODS, ON_PERIODS = 1, 3  # the loop off needs one period to show that hashing stays unbalanced


def drifting(periods: int, seed: int, clock: dict[str, int]) -> Iterator[dict[str, Any]]:
    """Zipf(1.0) over DRIFT_KEYS keys whose hot set shifts every PERIOD_S: each period maps the
    ranks to the keys through a fresh permutation, so the keys the last plan placed cool down and
    others, wherever they hash, take their load. Events are stamped with their scheduled send time
    at DRIFT_RATE from the moment the first is taken (``clock["start"]``, ms)."""
    per = DRIFT_RATE * PERIOD_S
    rng = np.random.default_rng(seed)
    start = 0
    for k in range(periods):
        perm = rng.permutation(DRIFT_KEYS)
        ranks = zipf_key_ids(per, DRIFT_KEYS, 1.0, seed * 100 + k)
        values = rng.integers(0, 400, size=per) / 4.0
        for i in range(per):
            if not start:
                start = clock["start"] = int(time.time() * 1000)
            n = k * per + i
            yield {
                "key": key_name(int(perm[ranks[i]])),
                "value": float(values[i]),
                "payload": n.to_bytes(8, "big"),
                "event_time": start + n * 1000 // DRIFT_RATE,
            }


def routed_records(kit: ReduceKit) -> tuple[np.ndarray, np.ndarray]:
    """Every data record of the routed topic (read to its end): its event time and its partition,
    which is the worker the routers sent it to."""
    codec = AvroCodec("io.ballast.RoutedEnvelope")
    times: list[int] = []
    workers: list[int] = []
    follower = TopicFollower(kit.kafka, kit.layout.name("routed"))
    try:
        for m in follower.read_to_end(300):
            value = m.value()
            if value and value.startswith(DATA_PREFIX):
                times.append(int(codec.decode(value)["body"][1]["event_time"]))
                workers.append(m.partition())
    finally:
        follower.close()
    return np.asarray(times, dtype=np.int64), np.asarray(workers, dtype=np.int64)


def max_over_mean(routed: tuple[np.ndarray, np.ndarray], start_ms: int, periods: int) -> list[list[float]]:
    """Per period, the max/mean over the workers of the records routed to each, in each INTERVAL_S
    of event time after the period's shift. Each interval must hold exactly its scheduled events:
    every event is counted, once."""
    times, workers = routed
    per_period = PERIOD_S // INTERVAL_S
    phase = (times >= start_ms) & (times < start_ms + periods * PERIOD_S * 1000)
    bins = (times[phase] - start_ms) // (INTERVAL_S * 1000)
    load = np.zeros((periods * per_period, WORKERS))
    np.add.at(load, (bins, workers[phase]), 1)
    assert load.sum(axis=1).tolist() == [DRIFT_RATE * INTERVAL_S] * len(load), load.sum(axis=1)
    ratios = load.max(axis=1) / load.mean(axis=1)
    rows = ratios.reshape(periods, per_period)
    return [[round(float(r), 3) for r in row] for row in rows]


def test_closed_loop_brings_a_drifting_zipf_stream_back_under_theta(kafka_config, tmp_path) -> None:
    """The loop reacts on 2 intervals above (``--consecutive 2``: the second lies wholly after the
    shift, so the plan is made from the new hot set, not a blend) with no gap beyond one interval,
    plans the last interval (``--no-forecast``: a hot set replaced in one step is the case the
    forecast's "the change once more" over-shoots, docs/controller.md), and sends each plan at
    once (``all-at-once``: the pacing is acceptance 3's; here it would only delay the loop).
    Records pricing: busy time per step on this deployment does not follow the records (see
    services/controller/interval_load.py), and the verdict counts records."""
    kit = ReduceKit(kafka_config, f"ctlloop-{tmp_path.name}", tmp_path / "stack")
    common = {"interval_s": INTERVAL_S, "theta": THETA, "pricing": "records", "status_every_s": 1}
    off = kit.pipe.controller("off", rebalance=False, **common)
    on = kit.pipe.controller(
        "on", consecutive=2, min_gap=1, forecast=False, pacing="all-at-once", step_timeout_s=60,
        plan_theta=PLAN_THETA, **common,
    )  # fmt: skip
    off_clock: dict[str, int] = {}
    on_clock: dict[str, int] = {}
    try:
        for rid in ("r1", "r2"):
            kit.start_router(rid, stats_interval_s=1, heavy_hitters_top=TRACKED)
        kit.start_job("agg", AGG, *JOB_ARGS)
        kit.pipe.start(off)
        kit.produce(drifting(OFF_PERIODS, 3, off_clock), DRIFT_RATE)
        kit.pipe.wait_reduce_caught_up("agg", 300)  # the job runs before the loop moves state
        kit.pipe.stop(off.name)
        assert [e["epoch"] for e in control_log(kit)] == [0], "the controller without a loop wrote"
        statuses = [s for s in kit.pipe.metrics_of(ControllerStatus) if s.controller == "off"]
        assert statuses and statuses[-1].decisions == 0
        assert max(s.realized_imbalance for s in statuses) > 1 + THETA  # it saw the imbalance

        kit.pipe.start(on)
        kit.produce(drifting(ON_PERIODS, 5, on_clock), DRIFT_RATE)
        kit.pipe.wait_routed(DRIFT_RATE * PERIOD_S * (OFF_PERIODS + ON_PERIODS), 300)
        routed = routed_records(kit)
        loop_off = max_over_mean(routed, off_clock["start"], OFF_PERIODS)
        loop_on = max_over_mean(routed, on_clock["start"], ON_PERIODS)
        migrations = [e for e in control_log(kit) if e["type"] == "MIGRATION_STEP"]
        shown = f"loop off {loop_off}, loop on {loop_on}; {len(migrations)} migration events"
        limit = 1 + THETA
        assert all(r > limit for row in loop_off for r in row), shown
        for row in loop_on:
            assert max(row[:2]) > limit, f"a shift that did not unbalance: {shown}"
            assert all(r <= limit for r in row[SETTLE:]), f"not back under {limit} within {SETTLE}: {shown}"
        starts = [e for e in migrations if e["payload"][1]["phase"] == "START"]
        dones = [e for e in migrations if e["payload"][1]["phase"] == "DONE"]
        assert len(starts) >= ON_PERIODS and len(dones) == len(starts)  # every plan went out and landed
    finally:
        kit.close()
