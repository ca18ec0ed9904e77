"""The simulated per-record cost: a CPU cost is CPU spent by the thread, a sleep is not."""

from __future__ import annotations

import argparse
import threading
import time

import pytest

from ballast.settings import SettingsError
from spark_jobs.record_cost import pay
from spark_jobs.reduce.config import ReduceSettings

pytestmark = pytest.mark.unit


def test_cpu_cost_spends_the_threads_cpu_time() -> None:
    before = time.thread_time()
    pay(0.05, "cpu")
    assert time.thread_time() - before >= 0.05


def test_sleep_cost_spends_wall_time_not_cpu() -> None:
    cpu, wall = time.thread_time(), time.monotonic()
    pay(0.05, "sleep")
    assert time.monotonic() - wall >= 0.05
    assert time.thread_time() - cpu < 0.02


def test_cpu_cost_stretches_when_threads_share_the_cpu() -> None:
    """Each of two threads that share one interpreter (the GIL: one core between them) spends its
    own CPU cost, so both together take about twice one cost in wall time, unlike a wall-clock spin."""
    started = time.monotonic()
    threads = [threading.Thread(target=pay, args=(0.1, "cpu")) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert time.monotonic() - started >= 0.18


def test_unknown_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown record cost kind 'gpu'"):
        pay(0.001, "gpu")


def _parse(*argv: str) -> ReduceSettings:
    parser = argparse.ArgumentParser()
    ReduceSettings.add_arguments(parser)
    return ReduceSettings.from_args(parser.parse_args(list(argv)), env={})


def test_the_reduce_job_takes_the_kind_by_flag_or_environment_and_refuses_others() -> None:
    assert _parse().record_cost_kind == "sleep"
    assert _parse("--record-cost-kind", "cpu").record_cost_kind == "cpu"
    env = {"BALLAST_REDUCE_RECORD_COST_KIND": "cpu"}
    assert ReduceSettings.from_args(None, env=env).record_cost_kind == "cpu"
    with pytest.raises((SystemExit, SettingsError)):
        _parse("--record-cost-kind", "gpu")
    with pytest.raises(SettingsError):
        ReduceSettings.from_args(None, env={"BALLAST_REDUCE_RECORD_COST_KIND": "gpu"})
