"""The arithmetic of results under shedding: Student's quantile and the estimates from terms."""

from __future__ import annotations

import math

import numpy as np
import pytest

from spark_jobs.processors.sampling import SamplingTerms, estimate, record_terms, t975


@pytest.mark.parametrize(
    ("df", "quantile"),
    # published 97.5 % quantiles of Student's t
    [
        (1, 12.7062),
        (2, 4.3027),
        (10, 2.2281),
        (30, 2.0423),
        (31, 2.0395),
        (40, 2.0211),
        (60, 2.0003),
        (120, 1.9799),
        (10_000, 1.9602),
    ],
)
def test_t975_matches_the_tables(df: int, quantile: float) -> None:
    assert t975(np.array([df]))[0] == pytest.approx(quantile, abs=1e-4)


def test_estimates_from_hand_terms() -> None:
    """Two rows: one nothing was shed from, one whose 4 counted records were kept with p = 1/2
    (values 1, 2, 3, 4) besides 1 record kept for sure (value 10) and 1 excluded kept with p = 1/2."""
    p = np.full(4, 0.5)
    counted = record_terms(p, np.array([1.0, 2.0, 3.0, 4.0]))
    excluded = record_terms(np.array([0.5]), None)
    terms = SamplingTerms(
        sampled=np.array([0, 5]),
        count=np.array([0.0, counted["ht_count"].sum() + excluded["ht_count"].sum()]),
        sum=np.array([0.0, counted["ht_sum"].sum()]),
        var_count=np.array([0.0, counted["ht_var_count"].sum() + excluded["ht_var_count"].sum()]),
        var_sum=np.array([0.0, counted["ht_var_sum"].sum()]),
        opaque_keep=np.full(2, np.nan),
    )
    est = estimate(np.array([3, 5]), np.array([6.0, 20.0]), np.array([1, 1]), terms)
    assert est.exact.tolist() == [True, False]
    assert est.estimated_count.tolist() == [4.0, 1 + 2 * 4 + 2]
    assert est.estimated_sum.tolist() == [6.0, 10 + 2 * 10]
    assert est.count_std_error.tolist() == [0.0, math.sqrt(5 * 0.5 / 0.25)]
    assert est.sum_std_error.tolist() == [0.0, math.sqrt(0.5 / 0.25 * (1 + 4 + 9 + 16))]
    assert est.keep_probability.tolist() == [1.0, 6 / 11]
    assert est.relative_error.tolist() == [0.0, math.sqrt(10) / 11]
    t = 2.776445105  # 4 degrees of freedom
    assert est.count_low.tolist() == [4.0, 6.0]  # 11 - t * 3.16 < 6 records seen
    assert est.count_high[1] == pytest.approx(11 + t * math.sqrt(10))
    assert est.sum_low[1] == pytest.approx(30 - t * math.sqrt(60))
    assert (est.count_low[0], est.count_high[0], est.sum_low[0], est.sum_high[0]) == (4.0, 4.0, 6.0, 6.0)


def test_nothing_shed_without_terms_is_exact() -> None:
    est = estimate(np.array([2]), np.array([1.5]), np.array([0]), None)
    assert est.exact.tolist() == [True] and est.estimated_sum.tolist() == [1.5]


def test_a_row_without_a_possible_estimate_says_so() -> None:
    terms = SamplingTerms.zeros(1)
    terms.opaque_keep = np.array([0.25])
    est = estimate(np.array([2]), np.array([1.5]), np.array([0]), terms)
    assert est.exact.tolist() == [False] and est.keep_probability.tolist() == [0.25]
    assert math.isinf(est.relative_error[0]) and est.estimated_count.tolist() == [2.0]
    for field in ("estimated_sum", "count_std_error", "sum_std_error", "count_low", "count_high", "sum_low"):
        assert math.isnan(getattr(est, field)[0]), field
