"""The reduce's micro-batch cost model: fitted from noisy batches, and the rate DS2 takes from it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from services.controller.scaling.batch_model import BatchModel, BatchSample, fit

pytestmark = pytest.mark.unit


def batches(
    fixed: float, per_row: float, n: int = 40, noise: float = 0.05, seed: int = 3
) -> list[BatchSample]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        workers = int(rng.integers(1, 9))
        rows = int(rng.integers(5_000, 200_000))
        duration = (fixed + rows * per_row / workers) * (1 + rng.uniform(-noise, noise))
        out.append(BatchSample(rows, workers, duration))
    return out


def test_the_fit_recovers_the_fixed_and_per_row_costs_through_noise() -> None:
    model = fit(batches(0.8, 20e-6))
    assert model is not None
    assert model.fixed_s == pytest.approx(0.8, rel=0.15)
    assert model.cost_per_row_s == pytest.approx(20e-6, rel=0.1)
    assert model.r2 > 0.9


def test_the_rate_per_worker_keeps_each_batch_inside_the_trigger() -> None:
    model = BatchModel(0.8, 20e-6, 40, 1.0)
    rate = model.rate_per_worker(2.0)
    assert rate == pytest.approx(30_000.0)
    # at that rate, T seconds of input over w workers take exactly T
    for workers in (1, 3, 8):
        assert model.duration_s(rate * workers * 2.0, workers) == pytest.approx(2.0)


def test_a_fixed_cost_that_fills_the_trigger_asks_for_no_workers() -> None:
    assert BatchModel(2.5, 20e-6, 40, 1.0).rate_per_worker(2.0) is None


def test_too_few_batches_or_no_spread_give_no_model() -> None:
    assert fit(batches(0.8, 20e-6, n=3)) is None
    same = [BatchSample(100_000, 4, 1.3 + 0.01 * i) for i in range(10)]
    assert fit(same) is None, "one batch size cannot separate the fixed cost from the per-row one"


def test_a_negative_intercept_is_refit_through_the_origin() -> None:
    samples = [BatchSample(r, 1, r * 10e-6 - 0.05) for r in range(10_000, 110_000, 10_000)]
    model = fit(samples)
    assert model is not None and model.fixed_s == 0.0 and model.cost_per_row_s > 0


def test_the_model_predicts_measured_reduce_batches_it_was_not_fitted_on() -> None:
    """Ballast's reduce on Spark, 2 workers, 5 seeds: fit on every other batch, predict the rest.
    The fixed cost is what Spark pays a batch whatever its rows (0.45-0.97 s here), so it must come
    out positive, and the held-out batches' median error stays within 20 %."""
    measured = json.loads((Path(__file__).parent / "measured" / "reduce_batches.json").read_text())
    workers = measured["workers"]
    for seed, rows in measured["seeds"].items():
        samples = [BatchSample(r, workers, ms / 1000) for r, ms in rows]
        model = fit(samples[::2])
        assert model is not None and model.fixed_s > 0.1, (seed, model)
        errors = [abs(model.duration_s(s.rows, workers) - s.duration_s) / s.duration_s for s in samples[1::2]]
        assert float(np.median(errors)) < 0.2, (seed, model, float(np.median(errors)))


def test_a_query_starting_batch_does_not_make_the_fixed_cost() -> None:
    """Measured (tests/e2e/test_scaling.py's reduce, 1 worker, 2 ms of sleep per row, 4 s trigger):
    the query's first batch read 9 rows in 24.2 s (Python workers spawned, the state store
    opened, the plan compiled), the others follow ~3.3 s + 1.96 ms per row. Least squares let that
    one batch make the fixed cost 12.4 s, past the trigger, and DS2 then asked for no worker at
    all; the fit is robust to it (Theil-Sen: the median of the pairwise slopes)."""
    measured = [(9, 24161), (6013, 15101), (5454, 14311), (7053, 16948), (8766, 20355), (10450, 23961),
                (12100, 28229), (14118, 32459), (16544, 36701), (18779, 40140)]  # fmt: skip
    model = fit([BatchSample(rows, 1, ms / 1000) for rows, ms in measured])
    assert model is not None
    assert model.cost_per_row_s == pytest.approx(1.96e-3, rel=0.05)
    assert 2.5 < model.fixed_s < 4.0
    assert model.rate_per_worker(8.0) is not None
