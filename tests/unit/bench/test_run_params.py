"""The benchmarks' one command line (bench/run_params.py), through the three benchmarks' own parse."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.migration.main import parse as parse_migration
from bench.reduce.main import parse as parse_reduce
from bench.shed.main import parse as parse_shed
from bench.shed.params import QUICK

pytestmark = pytest.mark.unit


def test_quick_values_then_explicit_flags_and_a_quick_run_writes_its_own_file():
    params, out = parse_shed(["--quick", "--target-s", "45", "--no-drain-off"])
    assert params.target_s == 45.0 and params.drain_off is False
    assert params.overload_s == QUICK["overload_s"] and out.name == "shed-quick.json"
    params, out = parse_shed(["--drain-off"])
    assert params.drain_off is True and out.name == "shed.json"
    _, out = parse_shed(["--quick", "--out", "/tmp/x.json"])
    assert out == Path("/tmp/x.json")


def test_every_benchmark_names_its_results_after_itself():
    assert parse_migration(["--quick"])[1].name == "migration-quick.json"
    assert parse_reduce([])[1].name == "reduce.json"
