"""A benchmark run's deployments: one failing is a result of its own, the others still run, and the
run is marked failed (so its logs are kept). Only :meth:`each` is exercised: no broker is started."""

from __future__ import annotations

import shutil

import pytest

from bench.scratch_broker import ScratchBroker

pytestmark = pytest.mark.unit


def test_a_failing_deployment_becomes_its_result_and_marks_the_run_failed():
    said: list[str] = []
    run = ScratchBroker("test", said.append)
    try:
        assert run.each("case", "on", lambda: {"case": "on", "x": 1}) == {"case": "on", "x": 1}
        assert not run.failed

        def boom() -> dict:
            raise RuntimeError("service exited")

        assert run.each("case", "off", boom) == {"case": "off", "error": "RuntimeError('service exited')"}
        assert run.failed and said == ["off failed: RuntimeError('service exited')"]
    finally:
        shutil.rmtree(run.workdir, ignore_errors=True)
