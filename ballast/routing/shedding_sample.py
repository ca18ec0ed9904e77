"""Which records shedding keeps: a pure function of the record and the SHEDDING event's seed.

Why not a random generator: the router used to draw from a per-process ``random.Random``. A
transaction that aborts is routed again from the committed offsets (by the same process after
abort-and-rewind, by a restarted process after a crash, by another router after a rebalance), and
a fresh draw kept other records than the aborted attempt. Exactly-once still held for what was
committed, but "which records the sample holds" depended on failures, and nobody (the reduce, a
test, an auditor) could say afterwards which records a setting kept. Here the decision is a
function of the record's identity and of the seed carried in the log, so every replay, every
router and every reader that knows the record computes the same decision.

The draw. A record is named by (input topic, input partition, input offset). Every input
partition has its own SplitMix64 stream (Steele, Lea and Flood, "Fast splittable pseudorandom
number generators", OOPSLA 2014; the generator behind ``java.util.SplittableRandom``), started at
a 64-bit ``base`` taken from BLAKE2b over (seed, partition, topic); the record at offset ``o`` takes
the stream's draw number ``o`` (SplitMix64 can be read at any position: state ``base + o * gamma``,
then its finalizer)::

    base(seed, topic, partition) = first 8 bytes, little-endian, of
                                   blake2b(int64_le(seed) + int32_le(partition) + utf8(topic), digest_size=8)
    z = (base + offset * 0x9E3779B97F4A7C15) mod 2**64
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9 mod 2**64
    z = (z ^ (z >> 27)) * 0x94D049BB133111EB mod 2**64
    z =  z ^ (z >> 31)
    u = (z >> 11) / 2**53                     # in [0, 1), exact in a double
    kept  <=>  u < keep_probability

Properties (tests/unit/ballast/routing/test_shedding_sample.py pins every one, and the numbers):

* **Deterministic**: no state, no process seed (``hash()`` of str/bytes is salted per process,
  so it is not used); the same record and seed give the same ``u`` everywhere, forever. The
  formula is the contract: changing it changes which records every replay keeps.
* **Uniform and independent across records**: SplitMix64's outputs pass BigCrush; consecutive
  offsets are consecutive draws of one stream. Two partitions' streams are the same sequence
  shifted by a BLAKE2b-random 64-bit distance, so they overlap within 2**40 offsets with
  probability about 2**-23 per pair.
* **Nested in p**: the record is kept iff ``u < p``, so a record kept at p is kept at every
  p' > p. Lowering the keep-probability under the same seed only drops more records, lifting it
  step by step only restores records; and the probability that a record survived is exactly the
  p in force for its epoch and topic, which is all Horvitz-Thompson weights (1/p) need.
* **Seeds decorrelate**: another seed is another base, so another stream.

Why the key is not hashed: (topic, partition, offset) already names one record, and the routing key
is not only the record's (``--key-field``, ``--string-key`` choose it). Leaving it out lets the
router draw a run of offsets at once with numpy before it parses them (:class:`Draws`): measured,
the decision costs about 0.1 µs per record that way, against 0.47-0.59 µs for a per-record hash
that includes the key, and 0.03 µs for the old ``random.random()`` (docs/router.md, "Shedding").

Why here, in the library: the router decides with it, and the reduce reads the same records
(their envelopes carry source topic, partition and offset) and may need the same draws;
:func:`draws` is the vectorised form for such readers. The library never imports a service.
"""

from __future__ import annotations

import hashlib
import struct
from array import array
from collections.abc import Callable

import numpy as np

__all__ = ["BLOCK", "GAMMA", "Draws", "draw", "draws", "keeps", "splitmix64", "stream_base"]

MASK64 = (1 << 64) - 1
GAMMA = 0x9E3779B97F4A7C15  # SplitMix64's increment: 2**64 / golden ratio, odd
MIX1 = 0xBF58476D1CE4E5B9
MIX2 = 0x94D049BB133111EB
UNIT = 2.0**-53
BLOCK = 4096  # draws computed at once by :class:`Draws` (one numpy pass)

_PACK = struct.Struct("<qi").pack
_U64 = np.uint64


def stream_base(seed: int, topic: str, partition: int) -> int:
    """The starting state of the stream of ``topic``'s ``partition`` under ``seed`` (uint64)."""
    data = _PACK(seed, partition) + topic.encode("utf-8")
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


def splitmix64(base: int, index: int) -> int:
    """Output number ``index`` of the SplitMix64 stream whose state starts at ``base`` (uint64)."""
    z = (base + index * GAMMA) & MASK64
    z = ((z ^ (z >> 30)) * MIX1) & MASK64
    z = ((z ^ (z >> 27)) * MIX2) & MASK64
    return z ^ (z >> 31)


def draw(seed: int, topic: str, partition: int, offset: int) -> float:
    """The record's uniform draw ``u`` in [0, 1) (the reference: plain Python, one record)."""
    return (splitmix64(stream_base(seed, topic, partition), offset) >> 11) * UNIT


def keeps(keep_probability: float, seed: int, topic: str, partition: int, offset: int) -> bool:
    """Whether shedding at ``keep_probability`` under ``seed`` keeps the record."""
    return draw(seed, topic, partition, offset) < keep_probability


def draws(seed: int, topic: str, partition: int, offsets: np.ndarray | list[int]) -> np.ndarray:
    """:func:`draw` for many offsets of one input partition at once (float64, the same numbers)."""
    o = np.asarray(offsets, dtype=np.int64).astype(_U64)
    z = o * _U64(GAMMA) + _U64(stream_base(seed, topic, partition))  # uint64 arrays wrap mod 2**64
    z = (z ^ (z >> _U64(30))) * _U64(MIX1)
    z = (z ^ (z >> _U64(27))) * _U64(MIX2)
    z ^= z >> _U64(31)
    return (z >> _U64(11)).astype(np.float64) * UNIT


class Draws:
    """The draws of the offsets a consumer walks through, computed a block at a time.

    A consumer reads each input partition in runs of consecutive offsets, so the draws of the
    next :data:`BLOCK` offsets are computed with numpy the first time one of them is asked for,
    and the loop then only indexes an array. ``blocks[(topic, partition)]`` is ``(first offset,
    draws)``, the draws an ``array('d')`` (8 bytes a draw: 32 KiB per partition read); the router's
    hot loop reads it inline (a method call per record would cost more than the draw).
    ``seed_of(topic)`` is the seed of the setting in force for the topic; build a new
    :class:`Draws` when the settings change.
    """

    def __init__(self, seed_of: Callable[[str], int], block: int = BLOCK) -> None:
        self.seed_of = seed_of
        self.block_size = block
        self.blocks: dict[tuple[str, int], tuple[int, array]] = {}

    def block(self, topic: str, partition: int, offset: int) -> tuple[int, array]:
        """The block that starts at ``offset`` (stored for the next offsets of the partition)."""
        offsets = np.arange(offset, offset + self.block_size, dtype=np.int64)
        us = array("d")
        us.frombytes(draws(self.seed_of(topic), topic, partition, offsets).tobytes())
        got = (offset, us)
        self.blocks[(topic, partition)] = got
        return got

    def draw(self, topic: str, partition: int, offset: int) -> float:
        """One record's draw through the blocks (what the router's loop does inline)."""
        start, us = self.blocks.get((topic, partition)) or (-1, array("d"))
        i = offset - start
        if not 0 <= i < len(us):
            start, us = self.block(topic, partition, offset)
            i = 0
        return us[i]
