"""Results that state their error: Horvitz–Thompson estimates of what shedding removed.

A router keeps each record of an input topic with the keep-probability ``p`` of the ``SHEDDING``
setting in force (independent Bernoulli trials: Poisson sampling). The reduce knows each record's
``p`` (its envelope epoch names the settings its router applied, see
:mod:`spark_jobs.reduce.ownership`), so a window's kept records estimate what the window was
offered without bias:

* count: ``N̂ = Σ 1/p_i``, sum: ``Ŝ = Σ x_i/p_i``;
* their variance, estimated from the same records: ``V̂(N̂) = Σ (1−p_i)/p_i²`` and
  ``V̂(Ŝ) = Σ (1−p_i) x_i²/p_i²`` (unbiased for Poisson sampling);
* a 95 % interval: ``estimate ± t · √V̂``, ``t`` the 97.5 % Student quantile with ``sampled − 1``
  degrees of freedom (1.96 for large samples); the count's lower end is never below the records
  seen, which the window certainly had.

Why only *deviation* terms are kept (``Σ (1/p − 1)``, not ``Σ 1/p``): a record kept with ``p = 1``
adds nothing to any of them, so a window nothing was shed from carries zeros, its estimates are
``count`` and ``sum`` exactly, and the engine writes no sampling rows at all while nothing is shed
(the state table does not even store all-zero columns, :mod:`spark_jobs.processors.table`).

Every term is a sum over records, so the columns merge like ``count`` does: partial states of a
moving key, corrections and replays add up to the terms of the whole window.

Small samples: the variance is estimated from the sampled records themselves, so with few of them
it is itself uncertain and a normal (z = 1.96) interval covers less than 95 %. Widening by the
Student quantile is the decision here (coverage measured in
``tests/unit/spark_jobs/reduce/test_shedding_estimates.py``, figures in docs/results.md). A window
whose every record was shed has no row at all: nothing reached the reduce to say it existed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from spark_jobs.processors.table import Column, Table

# the engine's sampling columns of every state row (sums over the row's records kept with p < 1)
SAMPLING_COLUMNS: dict[str, Column] = {
    "sampled": Column("i8", "sum", fill=0, since=2),  # records kept with p < 1 (counted or excluded)
    "ht_count": Column("f8", "sum", fill=0.0, since=2),  # Σ (1/p − 1), counted and excluded records
    "ht_sum": Column("f8", "sum", fill=0.0, since=2),  # Σ (1/p − 1) x, counted records
    "ht_var_count": Column("f8", "sum", fill=0.0, since=2),  # Σ (1 − p)/p²
    "ht_var_sum": Column("f8", "sum", fill=0.0, since=2),  # Σ (1 − p) x²/p², counted records
}
_TERMS = ("sampled", "ht_count", "ht_sum", "ht_var_count", "ht_var_sum")

# the 97.5 % quantile of Student's t with 1..30 degrees of freedom (beyond: the expansion below)
_T975 = (
    12.706204736, 4.302652730, 3.182446305, 2.776445105, 2.570581836, 2.446911851, 2.364624252,
    2.306004135, 2.262157163, 2.228138852, 2.200985160, 2.178812830, 2.160368656, 2.144786688,
    2.131449546, 2.119905299, 2.109815578, 2.100922040, 2.093024054, 2.085963447, 2.079613845,
    2.073873068, 2.068657610, 2.063898562, 2.059538553, 2.055529439, 2.051830516, 2.048407142,
    2.045229642, 2.042272456,
)  # fmt: skip
Z975 = 1.959963984540054


def t975(df: np.ndarray) -> np.ndarray:
    """The 97.5 % Student quantile per degrees of freedom (>= 1): exact to 1e-9 up to 30, then the
    Cornish–Fisher expansion (error below 1e-6 there), tending to 1.96."""
    df = np.maximum(np.asarray(df, dtype=np.int64), 1)
    table = np.asarray(_T975)
    small = table[np.minimum(df, len(_T975)) - 1]
    v = df.astype(np.float64)
    z = Z975
    large = (
        z
        + (z**3 + z) / (4 * v)
        + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * v**2)
        + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * v**3)
    )
    return np.where(df <= len(_T975), small, large)


def record_terms(keep: np.ndarray, value: np.ndarray | None) -> dict[str, np.ndarray]:
    """The sampling columns of records kept with probabilities ``keep`` (each below 1); without
    ``value`` (records excluded from the aggregates: late), only their count terms."""
    p = np.asarray(keep, dtype=np.float64)
    weight = 1.0 / p - 1.0
    var = (1.0 - p) / (p * p)
    terms = {
        "sampled": np.ones(p.size, dtype=np.int64),
        "ht_count": weight,
        "ht_var_count": var,
    }
    if value is not None:
        x = np.asarray(value, dtype=np.float64)
        terms["ht_sum"] = weight * x
        terms["ht_var_sum"] = var * x * x
    return terms


@dataclass
class SamplingTerms:
    """The sampling columns of emitted rows (parallel arrays), and ``opaque_keep``: for a row whose
    own records cannot show what was shed from it, the lowest keep-probability below 1 in force
    while its records could have been routed; NaN for every other row. Such a row is a per-key
    processor's (its windows are its own, the engine cannot attribute records to them) or a
    window none of whose seen records was kept with p < 1 while a setting below 1 was in force (its
    shed records may all have been dropped: ``sampled == 0`` cannot prove it exact). The rule is
    the engine's (``WorkerStep._opaque_terms``)."""

    sampled: np.ndarray
    count: np.ndarray
    sum: np.ndarray
    var_count: np.ndarray
    var_sum: np.ndarray
    opaque_keep: np.ndarray

    def __len__(self) -> int:
        return int(self.sampled.size)

    @staticmethod
    def zeros(n: int) -> SamplingTerms:
        """Rows nothing was shed from."""
        f = np.zeros(n, dtype=np.float64)
        return SamplingTerms(np.zeros(n, dtype=np.int64), f, f, f, f, np.full(n, np.nan))

    @staticmethod
    def of_rows(rows: Table) -> SamplingTerms:
        c = rows.columns
        n = len(rows)
        return SamplingTerms(
            *(np.asarray(c[name]) if name in c else np.zeros(n) for name in _TERMS),
            opaque_keep=np.full(n, np.nan),
        )

    @staticmethod
    def concat(parts: Sequence[SamplingTerms]) -> SamplingTerms:
        fields = ("sampled", "count", "sum", "var_count", "var_sum", "opaque_keep")
        return SamplingTerms(*(np.concatenate([getattr(p, f) for p in parts]) for f in fields))


@dataclass(frozen=True)
class Estimates:
    """Per result row: what it estimates the window was offered, and how exact that is.

    ``exact``: nothing of the window was shed (every estimate equals what was seen, errors 0, each
    interval a point): no record of it was kept with p < 1 and no ``opaque_keep`` says a setting
    below 1 was in force while its records could have been routed. ``keep_probability``: the
    share of the window's offered records that were kept, as estimated, ``(count + excluded) /
    estimated_count``: the harmonic mean of the kept records' keep-probabilities (their common
    value when one setting was in force); the ``opaque_keep`` when there is one. Unknown values
    (a row with an ``opaque_keep``: no estimate is possible) are NaN, ``relative_error`` +inf.
    """

    exact: np.ndarray
    sampled: np.ndarray
    keep_probability: np.ndarray
    estimated_count: np.ndarray
    estimated_sum: np.ndarray
    count_std_error: np.ndarray
    sum_std_error: np.ndarray
    count_low: np.ndarray
    count_high: np.ndarray
    sum_low: np.ndarray
    sum_high: np.ndarray
    relative_error: np.ndarray


def estimate(
    count: np.ndarray, total: np.ndarray, excluded: np.ndarray, terms: SamplingTerms | None
) -> Estimates:
    """The estimates of result rows from what they saw (``count`` and ``sum`` of the counted
    records, ``excluded`` records left out) and their sampling terms (None: nothing shed)."""
    n = np.asarray(count, dtype=np.int64).size
    terms = terms if terms is not None else SamplingTerms.zeros(n)
    seen = np.asarray(count, dtype=np.float64) + np.asarray(excluded, dtype=np.float64)
    est_count = seen + terms.count
    est_sum = np.asarray(total, dtype=np.float64) + terms.sum
    se_count = np.sqrt(np.maximum(terms.var_count, 0.0))
    se_sum = np.sqrt(np.maximum(terms.var_sum, 0.0))
    exact = terms.sampled == 0
    t = np.where(exact, 0.0, t975(terms.sampled - 1))
    with np.errstate(divide="ignore", invalid="ignore"):
        keep = np.where(est_count > 0, seen / est_count, 1.0)
        relative = np.where(est_count > 0, se_count / est_count, 0.0)
    opaque = ~np.isnan(terms.opaque_keep)
    if opaque.any():
        exact = exact & ~opaque
        keep = np.where(opaque, terms.opaque_keep, keep)
        relative = np.where(opaque, math.inf, relative)
        nan = np.nan
        est_count = np.where(opaque, seen, est_count)  # what was seen: no estimate is possible
        est_sum, se_count, se_sum = (np.where(opaque, nan, a) for a in (est_sum, se_count, se_sum))
    return Estimates(
        exact=exact,
        sampled=np.asarray(terms.sampled, dtype=np.int64),
        keep_probability=keep,
        estimated_count=est_count,
        estimated_sum=est_sum,
        count_std_error=se_count,
        sum_std_error=se_sum,
        count_low=np.maximum(est_count - t * se_count, seen),
        count_high=est_count + t * se_count,
        sum_low=est_sum - t * se_sum,
        sum_high=est_sum + t * se_sum,
        relative_error=relative,
    )
