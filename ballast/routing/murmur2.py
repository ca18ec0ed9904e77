"""Kafka's default-partitioner hash, bit for bit.

Ballast's base hash ``h`` must place a key exactly where a plain Kafka producer would, so that
hash-only Ballast is indistinguishable from Kafka's keyed partitioning and the routing table only
ever records *deviations* from it. That means reproducing Java's ``Utils.murmur2`` (MurmurHash2,
seed ``0x9747b28c``, little-endian 4-byte blocks, signed 32-bit result), ``Utils.toPositive``
(``h & 0x7fffffff``, not ``abs``) and ``toPositive(murmur2(key)) % numPartitions``.

Why hand-written: no library on PyPI reproduces Java's signed ``Utils.murmur2`` bit for bit (the
``murmurhash``/``mmh3`` packages implement MurmurHash3), and an off-by-one here would silently
disagree with every Java producer and with Spark's Kafka sink.

Two entry points exist because the two callers have opposite shapes:

* :func:`kafka_partition` hashes one key per call; the router calls it on the hot path, so it is
  plain Python over ints (no numpy call overhead per record): the 4-byte blocks come from
  ``struct.iter_unpack`` (about twice as fast as assembling them byte by byte), and the hashes of
  the last :data:`CACHED_KEYS` keys are kept (skewed keys repeat: a hot key costs a dictionary
  lookup, not a hash).
* :func:`murmur2_array` hashes a whole key universe at once with numpy ``uint32`` arithmetic
  (which wraps modulo 2**32 exactly like Java ints), and :func:`kafka_partition_array` turns those
  hashes into partitions; the simulator needs ``h`` for 10**6 keys.

Stable public names (the router imports them): ``kafka_partition(key: bytes, num_partitions: int)``,
``murmur2(data: bytes)``, ``to_positive(h: int)``.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

SEED = 0x9747B28C
_M = 0x5BD1E995
_R = 24
_MASK = 0xFFFFFFFF
# keys whose hash :func:`kafka_partition` keeps (about 100 bytes each)
CACHED_KEYS = 1 << 16


def murmur2(data: bytes, seed: int = SEED) -> int:
    """Java ``Utils.murmur2``: returns a *signed* 32-bit int, as Java does."""
    length = len(data)
    h = (seed ^ length) & _MASK
    n4 = length & ~3
    for (k,) in struct.iter_unpack("<I", memoryview(data)[:n4]):
        k = (k * _M) & _MASK
        k ^= k >> _R
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    rem = length & 3
    if rem:
        # Java's switch falls through: 3 -> 2 -> 1, then one multiply.
        if rem == 3:
            h ^= data[n4 + 2] << 16
        if rem >= 2:
            h ^= data[n4 + 1] << 8
        h ^= data[n4]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - 0x100000000 if h & 0x80000000 else h


def to_positive(h: int) -> int:
    """Java ``Utils.toPositive``: clears the sign bit (so ``Integer.MIN_VALUE`` maps to 0, unlike abs)."""
    return h & 0x7FFFFFFF


@lru_cache(maxsize=CACHED_KEYS)
def _positive_hash(key: bytes) -> int:
    return murmur2(key) & 0x7FFFFFFF


def kafka_partition(key: bytes, num_partitions: int) -> int:
    """Partition Kafka's default partitioner picks for a non-null key: the base hash ``h(k)``."""
    if num_partitions <= 0:
        raise ValueError("num_partitions must be positive")
    h = _positive_hash(key) if type(key) is bytes else murmur2(key) & 0x7FFFFFFF  # unhashable: not kept
    return h % num_partitions


def murmur2_array(keys: Sequence[bytes], seed: int = SEED) -> np.ndarray:
    """``toPositive(murmur2(k))`` for every key, as ``uint32``; vectorised per key length.

    Keys are grouped by length so each group is a dense ``(m, len)`` byte matrix; the block loop
    then runs ``len // 4`` numpy steps instead of one Python step per byte per key.
    """
    n = len(keys)
    out = np.empty(n, dtype=np.uint32)
    if n == 0:
        return out
    lengths = np.fromiter((len(k) for k in keys), dtype=np.int64, count=n)
    m = np.uint32(_M)
    for length in np.unique(lengths):
        idx = np.flatnonzero(lengths == length)
        length = int(length)
        if length:
            mat = np.frombuffer(b"".join(keys[i] for i in idx), dtype=np.uint8).reshape(len(idx), length)
        else:
            mat = np.zeros((len(idx), 0), dtype=np.uint8)
        h = np.full(len(idx), (seed ^ length) & _MASK, dtype=np.uint32)
        n4 = length & ~3
        for i in range(0, n4, 4):
            k = (
                mat[:, i].astype(np.uint32)
                | (mat[:, i + 1].astype(np.uint32) << 8)
                | (mat[:, i + 2].astype(np.uint32) << 16)
                | (mat[:, i + 3].astype(np.uint32) << 24)
            )
            k *= m
            k ^= k >> np.uint32(_R)
            k *= m
            h *= m
            h ^= k
        rem = length & 3
        if rem:
            if rem == 3:
                h ^= mat[:, n4 + 2].astype(np.uint32) << 16
            if rem >= 2:
                h ^= mat[:, n4 + 1].astype(np.uint32) << 8
            h ^= mat[:, n4].astype(np.uint32)
            h *= m
        h ^= h >> np.uint32(13)
        h *= m
        h ^= h >> np.uint32(15)
        out[idx] = h & np.uint32(0x7FFFFFFF)
    return out


def kafka_partition_array(hashes: np.ndarray, num_partitions: int) -> np.ndarray:
    """Vector form of :func:`kafka_partition` over precomputed :func:`murmur2_array` hashes (``int32``).

    Why hashes and not keys: the planner and the simulator hash a key universe once and ask for
    its hash homes under many worker counts.
    """
    if num_partitions <= 0:
        raise ValueError("num_partitions must be positive")
    return (np.asarray(hashes, dtype=np.uint32) % np.uint32(num_partitions)).astype(np.int32)
