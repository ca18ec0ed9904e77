"""`make demo`'s job, end to end on its own embedded stack: a broker, the router (exactly-once), a
routing update planned from the router's own metrics and appended to the control log, the Spark
stateful reduce moving the pinned keys live, and checks of the routed and output topics against the
records the demo produced. It must leave no process behind and print no librdkafka line (every
client is closed before the broker stops)."""

from __future__ import annotations

import os
import subprocess
import sys

from ballast.devstack.state import StackState
from services.demo.report import DemoReport


def test_demo_routes_exactly_once_rebalances_and_reduces(tmp_path):
    state = tmp_path / "demo-stack"
    report_file = tmp_path / "report.json"
    records = 20_000
    out = subprocess.run(
        [
            sys.executable, "-m", "services.demo", "--records", str(records),
            "--state-dir", str(state), "--report-json", str(report_file),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env={k: v for k, v in os.environ.items() if k != "BALLAST_BOOTSTRAP_SERVERS"},
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    report = DemoReport.read_json(report_file)
    assert report.started_stack and report.produced == records and report.flush_events == 1
    assert (report.missing, report.duplicated, report.dead_lettered) == (0, 0, 0)
    assert sum(sum(counts) for counts in report.load_by_epoch.values()) == records
    assert report.routed == records + 1  # the flush event is routed like any input record
    assert sorted(report.load_by_epoch) == [0, 1]
    assert report.plan is not None and report.plan.epoch == 1 and report.plan.pinned_keys > 0
    # markers of epoch 0 (start) and epoch 1 in every routed partition
    assert report.markers >= 2 * report.workers
    # the table helped: per-worker imbalance under the Mixed plan is below the hash's
    assert report.max_mean(1) < report.max_mean(0), report.load_by_epoch

    # the reduce: every key's windows add up to its input, and the pinned keys moved live
    r = report.reduce
    assert r is not None and r.error is None, r
    assert r.keys_checked == r.keys_expected > 0 and r.windows >= r.keys_expected
    assert (r.count_mismatches, r.sum_mismatches, r.unexpected_keys) == (0, 0, 0), r
    assert (r.split_windows, r.late_records, r.misplaced_steps, r.pending_keys) == (0, 0, 0, 0), r
    assert not r.dead_letters, r.dead_letters
    assert r.chunks_installed >= 1 and r.moves_expected >= 1 and not r.moves_missing, r
    assert len(r.keys_moved) >= r.moves_expected and r.ok and report.ok

    # no librdkafka line on either stream: no client outlived the broker, nothing failed
    lines = (out.stdout + out.stderr).splitlines()
    noise = [line for line in lines if any(w in line for w in ("librdkafka", "rdkafka#", "refused"))]
    assert not noise, noise[:5]
    # the stack the demo started is stopped and its folder (made by the demo) removed
    assert not state.exists() or all(n.pid is None for n in StackState.load(state).nodes)
    assert "demo OK: every record routed exactly once" in out.stdout
    assert "the reduce matches the input for every key" in " ".join(out.stdout.split())


def test_demo_with_a_bad_setting_starts_nothing(tmp_path):
    """A demo that fails early (bad setting) starts nothing and says why in one line."""
    out = subprocess.run(
        [sys.executable, "-m", "services.demo", "--records", "x", "--state-dir", str(tmp_path / "s")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith("error: --records:") and "'x'" in line
    assert not (tmp_path / "s").exists()
