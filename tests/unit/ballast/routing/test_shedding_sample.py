"""The keep draw of shedding (ballast/routing/shedding_sample.py): a pure function of the record.

Every bound below is a binomial (or normal) bound at 5 standard deviations over a fixed set of
records, so a test is deterministic (no random input) and a failure means the draw is broken, not
unlucky: at 5 sigma a correct draw fails one assertion in about 3.5 million.
"""

from __future__ import annotations

import itertools
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from ballast.paths import PROJECT_ROOT
from ballast.routing.shedding_sample import (
    BLOCK,
    Draws,
    draw,
    draws,
    keeps,
    splitmix64,
    stream_base,
)

pytestmark = pytest.mark.unit

PARTITIONS = 4
PER_PARTITION = 50_000  # 200,000 records in all
TOPIC = "ballast.input"


def all_draws(seed: int, topic: str = TOPIC) -> np.ndarray:
    """The draws of 200,000 records: 4 partitions x offsets 10**6 .. 10**6 + 50,000."""
    offsets = np.arange(10**6, 10**6 + PER_PARTITION)
    return np.concatenate([draws(seed, topic, p, offsets) for p in range(PARTITIONS)])


def within_binomial(kept: int, n: int, p: float) -> bool:
    return abs(kept - n * p) <= 5 * math.sqrt(n * p * (1 - p))


def test_the_stream_is_splitmix64():
    """SplitMix64 seeded with 1234567: the reference outputs (Vigna's splitmix64.c,
    java.util.SplittableRandom's mix64); draw number n is the stream's output n."""
    reference = [6457827717110365317, 3203168211198807973, 9817491932198370423, 4593380528125082431]
    assert [splitmix64(1234567, n) for n in range(1, 5)] == reference


def test_the_draw_is_pinned():
    """The formula is the contract: a change here changes which records every replay, every router
    and every reader of an existing log would keep. These values must never change."""
    assert stream_base(0, "in", 0) == 0x887C63C7519B2063
    assert stream_base(7, TOPIC, 3) == 0xEC2EAE3C75E1A81F
    assert [draw(0, "in", 0, o) for o in range(3)] == [
        0.18397473809460518,
        0.9053415379794565,
        0.6469799778922871,
    ]
    assert [draw(7, TOPIC, 3, o) for o in (0, 1, 2**40, 2**63 - 1)] == [
        0.14353771990379927,
        0.7267404754279779,
        0.7452003459214387,
        0.07338098856366171,
    ]
    assert draw(-1, "ü", 2**31 - 1, 5) == 0.27904481247392754


def test_the_same_in_another_process():
    """No process state: another interpreter (another hash salt) computes the same draws."""
    code = (
        "from ballast.routing.shedding_sample import draws; import numpy as np, sys;"
        f"sys.stdout.write(draws(11, {TOPIC!r}, 2, np.arange(0, 5000)).tobytes().hex())"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345", "PYTHONPATH": str(PROJECT_ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True, cwd=PROJECT_ROOT
    ).stdout
    assert bytes.fromhex(out) == draws(11, TOPIC, 2, np.arange(0, 5000)).tobytes()


def test_scalar_vectorised_and_blocks_agree_whatever_order_offsets_come_in():
    """A replay reads offsets again (back to the committed one), a reset jumps: the blocks the
    router reads inline give every offset its own draw."""
    offsets = [*range(0, 3 * BLOCK + 5), *range(100, 200), 10**12, 7, 2**62, *range(BLOCK - 3, BLOCK + 3)]
    expected = [draw(5, TOPIC, 1, o) for o in offsets]
    assert draws(5, TOPIC, 1, offsets).tolist() == expected
    blocks = Draws(lambda topic: 5)
    assert [blocks.draw(TOPIC, 1, o) for o in offsets] == expected
    assert all(0.0 <= u < 1.0 for u in expected)


def test_keep_probability_one_keeps_everything_and_zero_nothing():
    u = all_draws(3)
    assert (u < 1.0).all() and not (u < 0.0).any()
    assert keeps(1.0, 3, TOPIC, 0, 10**6) and not keeps(0.0, 3, TOPIC, 0, 10**6)


@pytest.mark.parametrize("p", [0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99])
def test_the_kept_fraction_is_p_within_binomial_bounds(p):
    u = all_draws(seed=2024)
    n = len(u)
    assert within_binomial(int((u < p).sum()), n, p), (int((u < p).sum()), n * p)
    for part in np.split(u, PARTITIONS):  # every partition's stream on its own, too
        assert within_binomial(int((part < p).sum()), len(part), p)


def test_draws_are_uniform_and_consecutive_offsets_uncorrelated():
    u = all_draws(seed=9)
    n = len(u)
    counts = np.bincount((u * 100).astype(int), minlength=100)
    chi2 = float(((counts - n / 100) ** 2 / (n / 100)).sum())
    assert chi2 < 99 + 5 * math.sqrt(2 * 99)  # chi-square, 99 degrees of freedom
    for part in np.split(u, PARTITIONS):
        lag1 = float(np.corrcoef(part[:-1], part[1:])[0, 1])
        assert abs(lag1) < 5 / math.sqrt(len(part))


def test_decisions_are_nested_in_p():
    """Kept at p means kept at every p' > p: lowering p only drops records, lifting it step by
    step only restores them, and each step adds a binomial share of the records not yet kept."""
    u = all_draws(seed=77)
    ladder = [0.05, 0.2, 0.35, 0.5, 0.7, 0.85, 1.0]
    for lo, hi in itertools.pairwise(ladder):
        kept_lo, kept_hi = u < lo, u < hi
        assert not (kept_lo & ~kept_hi).any()
        added = int((kept_hi & ~kept_lo).sum())
        left = int((~kept_lo).sum())
        assert within_binomial(added, left, (hi - lo) / (1 - lo))
    for offset in range(0, 2000, 7):
        kept_at = [keeps(p, 77, TOPIC, 1, offset) for p in ladder]
        assert kept_at == sorted(kept_at)  # False ... False True ... True


@pytest.mark.parametrize(
    "other",
    [
        pytest.param(dict(seed=2), id="another seed"),
        pytest.param(dict(seed=1, topic="other.input"), id="another topic"),
        pytest.param(dict(seed=-1), id="a negative seed"),
    ],
)
def test_other_seeds_and_topics_decorrelate(other):
    """Kept by both at p happens p**2 of the time, as for independent draws."""
    a = all_draws(seed=1)
    b = all_draws(**other)
    n, p = len(a), 0.5
    both = int(((a < p) & (b < p)).sum())
    assert within_binomial(both, n, p * p), (both, n * p * p)
    assert abs(float(np.corrcoef(a, b)[0, 1])) < 5 / math.sqrt(n)
    # partitions under one seed are other streams too
    parts = np.split(a, PARTITIONS)
    assert abs(float(np.corrcoef(parts[0], parts[1])[0, 1])) < 5 / math.sqrt(len(parts[0]))


def test_a_block_is_computed_once_per_run_of_offsets():
    blocks = Draws(lambda topic: 0)
    calls = []
    compute = blocks.block

    def counted(topic, partition, offset):
        calls.append((partition, offset))
        return compute(topic, partition, offset)

    blocks.block = counted  # type: ignore[method-assign]
    for o in range(2 * BLOCK):
        blocks.draw(TOPIC, 0, o)
    blocks.draw(TOPIC, 0, 5)  # a replay from an older offset starts a block there
    assert calls == [(0, 0), (0, BLOCK), (0, 5)]
