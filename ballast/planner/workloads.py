"""Seeded workloads for the simulator: the paper's Zipf-with-fluctuation, and real word frequencies.

A workload exposes ``keys`` (bytes, what a producer would send), ``hash_raw`` (their
``toPositive(murmur2)``), and ``intervals(T)`` yielding one per-key cost vector per interval.
State per interval is ``cost * state_per_record`` (a windowed join keeps its tuples), so the
window memory ``M_k`` grows with how hot the key has been over the last ``w`` intervals.

Fluctuation rate ``f`` (the paper's definition is garbled; our reconstruction, documented in
docs/planners.md): between consecutive intervals the per-key frequency vector changes by L1
distance at least ``f``, ``sum_k |p_k(t) - p_k(t-1)| >= f`` (range [0, 2], matching the paper's
tested range 0..2.0). The change is made only by *swapping* frequencies between pairs of keys whose
hash homes differ (so the multiset of frequencies, and hence the Zipf shape, is preserved and each
swap shifts load between two workers). Pair ``(a, b)``: ``a`` drawn by frequency (hot keys cool
down), ``b`` uniformly (a random key heats up); pairs are disjoint, so the L1 change is exactly the
sum of ``2 |p_a - p_b|`` and the prefix of pairs that first reaches ``f`` is applied.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from ballast.routing.murmur2 import kafka_partition_array, murmur2_array
from ballast.workload import zipf_probabilities


def fluctuate(
    p: np.ndarray, home: np.ndarray, num_workers: int, f: float, rng: np.random.Generator
) -> tuple[np.ndarray, float]:
    """Swap frequencies between key pairs on different workers until the load change reaches f.

    The change is ``sum_d |L_d(t) - L_d(t-1)| / mean L`` under hash placement (so it is a property
    of the workload, identical for every planner). Returns the new vector and the change made.
    """
    q, change, _ = swap_pairs(p, home, num_workers, f, rng)
    return q, change


def swap_pairs(
    p: np.ndarray, home: np.ndarray, num_workers: int, f: float, rng: np.random.Generator
) -> tuple[np.ndarray, float, np.ndarray]:
    """:func:`fluctuate`, also returning the swapped pairs as an ``(m, 2)`` array of key indices.

    The pairs are what a workload needs to give each swap its own instant inside an interval
    (both keys of a pair change at the same moment, so the total rate stays constant).
    """
    if f <= 0:
        return p, 0.0, np.empty((0, 2), dtype=np.int64)
    n = p.size
    q = p.copy()
    delta = np.zeros(num_workers)
    mean = q.sum() / num_workers
    used = np.zeros(n, dtype=bool)
    change = 0.0
    batch = min(n, 512)
    pairs: list[tuple[int, int]] = []
    while change < f and len(pairs) < n // 2:
        # Hot keys cool down: `a` drawn by frequency; a random key heats up: `b` uniform.
        a_cand = rng.choice(n, size=batch, p=q / q.sum())
        b_cand = rng.integers(0, n, size=batch)
        progressed = False
        for a, b in zip(a_cand.tolist(), b_cand.tolist(), strict=True):
            if used[a] or used[b] or a == b or home[a] == home[b]:
                continue
            used[a] = used[b] = True
            diff = q[a] - q[b]
            q[a], q[b] = q[b], q[a]
            delta[home[a]] -= diff
            delta[home[b]] += diff
            pairs.append((a, b))
            progressed = True
            change = float(np.abs(delta).sum()) / mean
            if change >= f:
                break
        if not progressed:
            break
    return q, change, np.array(pairs, dtype=np.int64).reshape(-1, 2)


@dataclass
class ZipfWorkload:
    """Zipf(z) over K integer keys (sent as decimal strings), ranks shuffled by the seed."""

    num_keys: int
    z: float = 0.85
    f: float = 1.0
    num_workers: int = 20
    seed: int = 1
    records_per_interval: float = 1e6
    state_per_record: float = 1.0
    keys: list[bytes] = field(init=False, repr=False)
    hash_raw: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.keys = [str(k).encode() for k in range(self.num_keys)]
        self.hash_raw = murmur2_array(self.keys)

    @property
    def name(self) -> str:
        return f"zipf(z={self.z},K={self.num_keys},f={self.f})"

    def intervals(self, count: int) -> Iterator[np.ndarray]:
        rng = np.random.default_rng(self.seed)
        home = kafka_partition_array(self.hash_raw, self.num_workers)
        p = np.empty(self.num_keys)
        p[rng.permutation(self.num_keys)] = zipf_probabilities(self.num_keys, self.z)
        for t in range(count):
            if t:
                p, _ = fluctuate(p, home, self.num_workers, self.f, rng)
            yield p * self.records_per_interval

    def state(self, cost: np.ndarray) -> np.ndarray:
        return cost * self.state_per_record


@dataclass
class WordFreqWorkload:
    """Words sampled by their real frequencies (wordfreq's lists), with drift over the run.

    ``mode="language"``: the vocabulary is the union of the top-K lists of ``lang`` and
    ``lang_to``; interval t samples from ``(1 - a_t) * p_lang + a_t * p_lang_to`` with ``a_t``
    rising linearly from 0 to 1 (a topic/locale shift). ``mode="rank"``: the active vocabulary is
    the rank window ``[t * shift, t * shift + K)`` of ``lang``'s list, so the top words fade out
    over time. Each interval draws ``records_per_interval`` words (multinomial, seeded), so counts
    carry sampling noise like a real stream.
    """

    num_keys: int = 10_000
    num_workers: int = 20
    mode: str = "language"
    lang: str = "en"
    lang_to: str = "fr"
    shift: int = 50
    seed: int = 1
    records_per_interval: int = 1_000_000
    state_per_record: float = 1.0
    total_intervals: int = 50
    keys: list[bytes] = field(init=False, repr=False)
    hash_raw: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        import wordfreq  # local import: only this workload needs the word lists

        if self.mode == "language":
            a = wordfreq.top_n_list(self.lang, self.num_keys)
            b = wordfreq.top_n_list(self.lang_to, self.num_keys)
            words = list(dict.fromkeys(a + b))
            self._p_from = self._freqs(wordfreq, words, set(a), self.lang)
            self._p_to = self._freqs(wordfreq, words, set(b), self.lang_to)
        elif self.mode == "rank":
            span = self.num_keys + self.shift * self.total_intervals
            words = wordfreq.top_n_list(self.lang, span)
            self._p_all = np.array([wordfreq.word_frequency(w, self.lang) for w in words])
        else:
            raise ValueError(f"unknown mode {self.mode!r}")
        self.keys = [w.encode("utf-8") for w in words]
        self.hash_raw = murmur2_array(self.keys)

    @staticmethod
    def _freqs(wordfreq_mod, words: list[str], active: set[str], lang: str) -> np.ndarray:
        p = np.array([wordfreq_mod.word_frequency(w, lang) if w in active else 0.0 for w in words])
        return p / p.sum()

    @property
    def name(self) -> str:
        return f"wordfreq({self.mode},{self.lang}->{self.lang_to if self.mode == 'language' else self.shift})"

    def intervals(self, count: int) -> Iterator[np.ndarray]:
        rng = np.random.default_rng(self.seed)
        n = len(self.keys)
        for t in range(count):
            if self.mode == "language":
                a = t / max(1, count - 1)
                p = (1 - a) * self._p_from + a * self._p_to
            else:
                p = np.zeros(n)
                lo = min(t * self.shift, n - self.num_keys)
                p[lo : lo + self.num_keys] = self._p_all[lo : lo + self.num_keys]
            p = p / p.sum()
            yield rng.multinomial(self.records_per_interval, p).astype(np.float64)

    def state(self, cost: np.ndarray) -> np.ndarray:
        return cost * self.state_per_record
