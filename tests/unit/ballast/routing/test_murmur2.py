"""Kafka murmur2 compatibility: the base hash must equal Java's Utils.murmur2 / default partitioner."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ballast.routing.murmur2 import (
    kafka_partition,
    kafka_partition_array,
    murmur2,
    murmur2_array,
    to_positive,
)

pytestmark = pytest.mark.unit

# Values from Kafka's own UtilsTest (clients/src/test/java/.../utils/UtilsTest.java) and from
# projects that test against Kafka's Java implementation (Akka's Murmur2Spec).
JAVA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
    b"1": -1993445489,
    b"12": 126087238,
    b"123": -267702483,
    b"1234": -1614185708,
    b"12345": -1188365604,
}


@pytest.mark.parametrize(("key", "expected"), sorted(JAVA_VECTORS.items()))
def test_murmur2_matches_java_vectors(key, expected):
    assert murmur2(key) == expected


def test_vectorised_hash_matches_java_vectors():
    keys = list(JAVA_VECTORS)
    expected = np.array([JAVA_VECTORS[k] & 0x7FFFFFFF for k in keys], dtype=np.uint32)
    assert np.array_equal(murmur2_array(keys), expected)


def test_partition_is_to_positive_mod_n():
    # toPositive clears the sign bit (it is not abs): -973932308 & 0x7fffffff = 1173551340.
    assert to_positive(-973932308) == 1173551340
    assert to_positive(-(2**31)) == 0
    assert kafka_partition(b"21", 7) == 1173551340 % 7
    assert kafka_partition(b"foobar", 10) == (-790332482 & 0x7FFFFFFF) % 10


def test_partition_rejects_zero_partitions():
    with pytest.raises(ValueError):
        kafka_partition(b"x", 0)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(min_size=0, max_size=23), min_size=1, max_size=30), st.integers(1, 97))
def test_vector_and_scalar_agree(keys, n):
    scalar = [kafka_partition(k, n) for k in keys]
    assert kafka_partition_array(murmur2_array(keys), n).tolist() == scalar


def test_a_kept_hash_is_the_hash_for_every_key_shape_and_length():
    """kafka_partition keeps the hashes of recent keys (bytes only); every shape and length of key,
    asked once or again, gets the partition of the uncached hash."""
    keys = [bytes(range(n)) for n in range(0, 41)] + [b"user-0000001", b"\xff" * 7]
    for _ in range(2):  # the second round reads what the first kept
        for k in keys:
            expected = (murmur2(k) & 0x7FFFFFFF) % 7
            assert kafka_partition(k, 7) == expected
            assert kafka_partition(bytearray(k), 7) == expected
            assert kafka_partition(memoryview(k), 7) == expected
