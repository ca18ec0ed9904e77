"""The controller as the only writer, on a real broker, as a process (``ballast controller run``).

Acceptance 1: three writers send 1,000 requests at once; the log holds each accepted one exactly
once, in one gap-free order, every router applied them in that order (their markers), and a resend
gets its first answer. Acceptance 2: a second controller fences the first; ``control send`` with no
controller says so within its time-out. Acceptance 7: malformed, oversized and conflicting
requests, at least ten kinds, are each refused with a reason, the controller keeps running and the
log is unchanged. And a migration asked for with REBALANCE, answered in one batch with another
request, keeps the log in epoch order.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections import defaultdict

import pytest

from ballast.avro.codec import AvroCodec
from ballast.control.log import ControlLogReader
from ballast.control.requests import ControlClient
from ballast.control.state import initial_state
from ballast.harness.pipeline import Pipeline
from ballast.kafka.clients import make_producer
from ballast.kafka.reading import read_topic
from ballast.kafka.topics import TopicLayout
from ballast.routing.murmur2 import kafka_partition
from ballast.waiting import wait_until

WORKERS = 4


@pytest.fixture
def deployment(kafka_config, unique, tmp_path):
    layout = TopicLayout(prefix=unique("ctl"), workers=WORKERS, input_partitions=2)
    pipe = Pipeline(kafka_config, layout, tmp_path / "stack", issuer="controller-tests")
    try:
        yield pipe
    finally:
        pipe.close()


def folded(pipe: Pipeline):
    reader = ControlLogReader(pipe.kafka, pipe.layout.name("control"), initial_state(WORKERS), start_offset=0)
    try:
        events = reader.read_to_end(60)
        assert not reader.skipped, f"records that are no next event: {dict(reader.skipped)}"
        return events, reader.state
    finally:
        reader.close()


def test_three_writers_each_request_once_in_one_order_every_router_follows(deployment):
    pipe = deployment
    pipe.start(pipe.controller("c1", rebalance=False))
    pipe.start(pipe.router("r1", commit_interval_ms=100, log_level="warning"))
    pipe.start(pipe.router("r2", commit_interval_ms=100, log_level="warning"))
    answers: dict[str, object] = {}
    lock = threading.Lock()

    def writer(w: int) -> None:
        client = ControlClient(pipe.kafka, pipe.layout, f"writer-{w}")
        try:
            ids = [
                client.send(
                    "ROUTING_UPDATE",
                    {"assign": {f"k-{w}-{i}": (i + w) % WORKERS}, "reason": ""},
                    request_id=f"w{w}-{i}",
                )
                for i in range(334 if w < 2 else 332)
            ]
            got = client.wait(ids, 120)
            with lock:
                answers.update(got)
        finally:
            client.close()

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert len(answers) == 1000 and all(a.accepted and not a.duplicate for a in answers.values())
    events, state = folded(pipe)  # the fold refuses a gap or a conflicting duplicate
    by_request = defaultdict(list)
    for e in events:
        if e.get("request_id"):
            by_request[e["request_id"]].append(e["epoch"])
    assert set(by_request) == set(answers) and all(len(v) == 1 for v in by_request.values())
    assert all(answers[r].epoch == v[0] for r, v in by_request.items())
    epochs = [e["epoch"] for e in events]
    assert epochs == list(range(epochs[0], epochs[-1] + 1))  # one gap-free order
    # a resend with the same id: the first answer, nothing appended
    client = ControlClient(pipe.kafka, pipe.layout, "resender")
    try:
        again = client.request("ROUTING_UPDATE", {"assign": {"other": 1}}, request_id="w1-7", timeout=30)
    finally:
        client.close()
    assert (again.accepted, again.duplicate, again.epoch) == (True, True, answers["w1-7"].epoch)
    assert folded(pipe)[1].epoch == state.epoch
    # every router applied the epochs in the log's order: its markers never go back, and reach the end
    pipe.wait_epoch(state.epoch, 120)
    codec = AvroCodec("io.ballast.RoutedEnvelope")
    seen: dict[tuple[str, int], list[int]] = defaultdict(list)
    for m in read_topic(pipe.kafka, pipe.layout.name("routed"), idle=2.0, timeout=120):
        branch, body = codec.decode(m.value())["body"]
        if branch == "io.ballast.EpochMarker":
            seen[(body["router_id"], m.partition())].append(body["epoch"])
    assert {r for r, _ in seen} == {"r1", "r2"}
    for marks in seen.values():
        assert marks == sorted(marks) and marks[-1] == state.epoch


def ballast(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ballast.cli", *args], capture_output=True, text=True,
                          timeout=timeout)  # fmt: skip


def test_a_second_controller_fences_the_first_and_send_without_one_says_so(deployment, bootstrap):
    pipe = deployment
    conn = ("--bootstrap", bootstrap, "--prefix", pipe.layout.prefix)
    none = ballast("control", "send", "--assign", "k=1", "--timeout", "3", *conn)
    lines = [x for x in (none.stdout + none.stderr).splitlines() if x.strip()]
    assert none.returncode == 1 and len(lines) == 1 and "no controller answered within 3 s" in lines[0], lines
    pipe.start(pipe.controller("first", rebalance=False))
    # the queued request expired meanwhile? no: 60 s time to live, so the first controller applies it
    pipe.start(pipe.controller("second", rebalance=False))
    sent = ballast("control", "send", "--assign", "j=2", *conn)
    assert sent.returncode == 0, sent.stderr
    code = pipe.wait_exit("controller-first", 60)
    assert code == 3
    assert "fenced: another controller instance took the control log over" in pipe.log("controller-first")
    events, _ = folded(pipe)
    assert [e["payload"][1]["assign"] for e in events if e["type"] == "ROUTING_UPDATE"] == [
        {"k": 1},
        {"j": 2},
    ]


def test_bad_requests_are_refused_with_reasons_and_change_nothing(deployment):
    pipe = deployment
    pipe.start(pipe.controller("c1", rebalance=False, max_request_keys=3))
    client = ControlClient(pipe.kafka, pipe.layout, "bad")
    try:
        ok = client.request("ROUTING_UPDATE", {"assign": {"hot": 1}}, timeout=30)
        before = folded(pipe)[1].epoch
        cases = {
            "malformed": lambda: client.send_raw(b"\x00not avro", "bad-1") or "bad-1",
            "unknown-kind": lambda: client.send("REPARTITION", {"num_workers": 2}),
            "kind-mismatch": lambda: (
                client.send_raw(
                    client.encode(
                        "SHEDDING",
                        {"num_workers": 2, "reason": ""},
                        "bad-3",
                        record="io.ballast.ScaleRequest",
                    ),
                    "bad-3",
                )
                or "bad-3"
            ),
            "too-large": lambda: client.send("ROUTING_UPDATE", {"assign": {f"k{i}": 1 for i in range(4)}}),
            "stale-epoch": lambda: client.send("SCALE", {"num_workers": 2}, expected_epoch=before - 1),
            "empty-update": lambda: client.send("ROUTING_UPDATE", {"assign": {}}),
            "invalid-key": lambda: client.send("ROUTING_UPDATE", {"assign": {"": 1}}),
            "assign-and-unassign": lambda: client.send(
                "ROUTING_UPDATE", {"assign": {"a": 1}, "unassign": ["a"]}
            ),
            "worker-out-of-range": lambda: client.send("ROUTING_UPDATE", {"assign": {"a": 9}}),
            "workers-out-of-range": lambda: client.send("SCALE", {"num_workers": 0}),
            "keep-probability-out-of-range": lambda: client.send(
                "SHEDDING", {"target": "x", "keep_probability": 1.5}
            ),
            "empty-target": lambda: client.send("SHEDDING", {"target": "", "keep_probability": 0.5}),
            "scale-leaves-pins": lambda: client.send("SCALE", {"num_workers": 1}),
        }
        ids = {reason: send() for reason, send in cases.items()}
        got = client.wait(list(ids.values()), 60)
    finally:
        client.close()
    assert ok.accepted
    assert {reason: got[rid].reason for reason, rid in ids.items()} == {r: r for r in cases}
    assert not any(got[rid].accepted for rid in ids.values())
    assert folded(pipe)[1].epoch == before  # the log is unchanged
    assert pipe.running("controller-c1")


def test_a_migration_asked_for_and_a_request_in_one_batch_keep_the_log_in_epoch_order(deployment):
    """REBALANCE ``{"dry_run": false}`` starts a migration: its START and first step are the
    controller's own events, numbered when the request is answered. A request answered after it in
    the same batch takes the next epochs, so the migration's events must be written before it, in
    the same transaction: written after it, the log had a gap at that request's epoch and every
    reader refused it."""
    pipe = deployment
    pipe.start(pipe.controller("c1", rebalance=False, interval_s=1, pricing="records", forecast=False))
    pipe.start(pipe.router("r1", commit_interval_ms=100, stats_interval_s=1, log_level="warning"))
    hot = [k for k in (f"hot-{i}" for i in range(200)) if kafka_partition(k.encode(), WORKERS) == 0][:3]
    keys = [hot[i % 3] if i % 2 else f"cold-{i % 500}" for i in range(60_000)]
    start = 1_767_225_600_000
    events = [{"key": k, "value": 1.0, "payload": b"", "event_time": start + i} for i, k in enumerate(keys)]
    client = ControlClient(pipe.kafka, pipe.layout, "batch")
    try:
        feeder = threading.Thread(target=pipe.produce, args=(events, 10_000), daemon=True)
        feeder.start()

        def planned() -> bool:
            answer = client.request("REBALANCE", {"dry_run": True}, timeout=30)
            return answer.accepted and bool(json.loads(answer.detail)["assign"])

        wait_until(planned, 60, "a plan that moves keys", 0.5)
        # both requests in one producer batch: the controller consumes them in one poll
        producer = make_producer(pipe.kafka)
        rebalance = client.encode("REBALANCE", {"dry_run": False}, "both-1")
        update = client.encode("ROUTING_UPDATE", {"assign": {"elsewhere": 1}, "reason": ""}, "both-2")
        producer.produce(pipe.layout.name("requests"), value=rebalance, key=b"both-1")
        producer.produce(pipe.layout.name("requests"), value=update, key=b"both-2")
        producer.flush(30)
        got = client.wait(["both-1", "both-2"], 60)
        feeder.join(120)
    finally:
        client.close()
    assert got["both-1"].accepted and got["both-2"].accepted
    events_, _ = folded(pipe)  # the fold refuses a gap
    epochs = [e["epoch"] for e in events_]
    assert epochs == list(range(len(epochs)))
    kinds = [(e["type"], e.get("request_id", "")) for e in events_]
    start = kinds.index(("MIGRATION_STEP", ""))
    assert kinds.index(("ROUTING_UPDATE", "both-2")) > start
    assert pipe.running("controller-c1")
